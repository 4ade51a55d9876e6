package arrival

import (
	"bytes"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// Staleness of the canonical files: for each entry acknowledged to a
// watched session, the time from its acknowledgement (as the client saw
// it) to the first time the watcher found it in the session's transcript
// on disk; an entry never found before the watcher stops counts with its
// age then, a lower bound. The watcher reads the new bytes of each watched
// transcript every watchEvery, so a figure is late by up to that period.
const watchEvery = 100 * time.Millisecond

// watcher records when acknowledged entries first appear in their
// transcripts.
type watcher struct {
	files []*watchedFile
	mu    sync.Mutex
	ack   map[string]time.Time // uuid -> acknowledged
	seen  map[string]time.Time // uuid -> first found on disk
}

// watchedFile is how far one transcript has been read. A compaction
// replaces the file (a new inode): it is then read again from the start.
type watchedFile struct {
	path string
	ino  uint64
	off  int64
	buf  []byte
}

func newWatcher(root string, sessions []client.Session) *watcher {
	w := &watcher{ack: map[string]time.Time{}, seen: map[string]time.Time{}}
	for _, s := range sessions {
		w.files = append(w.files, &watchedFile{path: harness.TranscriptPath(root, s)})
	}
	return w
}

func (w *watcher) acked(uuids []string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, u := range uuids {
		w.ack[u] = at
	}
}

// poll reads what every watched transcript gained since the last poll.
func (w *watcher) poll() error {
	for _, f := range w.files {
		ids, err := f.newUUIDs()
		if err != nil {
			return err
		}
		now := time.Now()
		w.mu.Lock()
		for _, id := range ids {
			if _, ok := w.seen[id]; !ok {
				w.seen[id] = now
			}
		}
		w.mu.Unlock()
	}
	return nil
}

// pending counts the acknowledged entries not found on disk yet.
func (w *watcher) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id := range w.ack {
		if _, ok := w.seen[id]; !ok {
			n++
		}
	}
	return n
}

// watch polls every watchEvery until stop is closed, then once more.
func (w *watcher) watch(stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			if err := w.poll(); err != nil {
				done <- err
				return
			}
			select {
			case <-stop:
				done <- w.poll()
				return
			case <-tick.C:
			}
		}
	}()
	return done
}

// drain polls until every acknowledged entry was found or within passed.
func (w *watcher) drain(within time.Duration) error {
	deadline := time.Now().Add(within)
	for w.pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(watchEvery)
		if err := w.poll(); err != nil {
			return err
		}
	}
	return nil
}

// staleness is what the watcher found.
type staleness struct {
	entries  int     // acknowledged entries of the watched sessions
	unseen   int     // never found on disk (their age at the end counted)
	max, p99 float64 // seconds
}

func (w *watcher) result(end time.Time) staleness {
	w.mu.Lock()
	defer w.mu.Unlock()
	ages := make([]float64, 0, len(w.ack))
	s := staleness{entries: len(w.ack)}
	for id, at := range w.ack {
		seen, ok := w.seen[id]
		if !ok {
			s.unseen++
			seen = end
		}
		ages = append(ages, max(seen.Sub(at).Seconds(), 0))
	}
	if len(ages) == 0 {
		return s
	}
	slices.Sort(ages)
	i := max(0, min(int(math.Ceil(0.99*float64(len(ages))))-1, len(ages)-1))
	s.max, s.p99 = ages[len(ages)-1], ages[i]
	return s
}

// newUUIDs returns the uuids of the whole lines f gained since the last
// call (all of them when the file was replaced).
func (f *watchedFile) newUUIDs() ([]string, error) {
	fd, err := os.Open(f.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	if ino != f.ino || fi.Size() < f.off {
		f.ino, f.off = ino, 0
	}
	if fi.Size() == f.off {
		return nil, nil
	}
	if _, err := fd.Seek(f.off, io.SeekStart); err != nil {
		return nil, err
	}
	f.buf, err = io.ReadAll(fd)
	if err != nil {
		return nil, err
	}
	end := bytes.LastIndexByte(f.buf, '\n') + 1
	f.off += int64(end)
	return uuidsIn(f.buf[:end]), nil
}

// uuidsIn returns the "uuid" field of each line of b.
func uuidsIn(b []byte) []string {
	key := []byte(`"uuid":"`)
	var ids []string
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if i := bytes.Index(line, key); i >= 0 && len(line) >= i+len(key)+36 {
			ids = append(ids, string(line[i+len(key):i+len(key)+36]))
		}
	}
	return ids
}
