package recovery

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// timedRead is one cold read baseline.
type timedRead struct {
	bytes   int64
	files   int
	elapsed time.Duration
}

func (t timedRead) mbps() float64 { return mbPerSec(t.bytes, t.elapsed) }

func mbPerSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

// logSegments lists the journal's segments in dir
// ("<seq as 16 hex digits>.wal", see internal/journal), in seq order, which is
// the order recovery reads them (the fixed-width names sort as their
// seqs), and their total size. Temp files and the copies of damaged
// segments kept aside are not segments.
func logSegments(dir string) ([]string, int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("list log segments: %w", err)
	}
	var paths []string
	var total int64
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), ".wal")
		if !ok || len(base) != 16 || strings.Trim(base, "0123456789abcdef") != "" || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, 0, fmt.Errorf("list log segments: %w", err)
		}
		paths = append(paths, filepath.Join(dir, e.Name()))
		total += fi.Size()
	}
	sort.Strings(paths)
	return paths, total, nil
}

// writeSyncedFile writes size bytes of incompressible data to path and
// syncs it: the sequential-read baseline.
func writeSyncedFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, recoveryReadBuf)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			buf[i+k] = byte(v >> (8 * k))
		}
	}
	for left := size; left > 0; {
		n := int64(len(buf))
		if n > left {
			n = left
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// evict makes paths cold: fsync first, since POSIX_FADV_DONTNEED drops only
// clean pages, then drop every cached page of each file.
func evict(paths ...string) error {
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("evict %s: %w", p, err)
		}
	}
	return nil
}

// readCold reads paths one after the other with large reads and times it.
func readCold(paths ...string) (timedRead, error) {
	buf := make([]byte, recoveryReadBuf)
	t := timedRead{files: len(paths)}
	start := time.Now()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return t, err
		}
		for {
			n, err := f.Read(buf)
			t.bytes += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return t, fmt.Errorf("read %s: %w", p, err)
			}
		}
		f.Close()
	}
	t.elapsed = time.Since(start)
	return t, nil
}

// daemonLogLine is what the bench reads from one line of sessiond's JSON
// log: when it was logged, how long the step it reports took, and the
// counts "checked journals" gives.
type daemonLogLine struct {
	at       time.Time
	took     time.Duration
	journals int64 // sessions whose entries the log holds
	bytes    int64 // size of the segments read
}

// daemonLog returns the last line of sessiond's JSON log at logPath whose
// message is msg (logged at info level), and whether there is one with a
// readable time and took.
func daemonLog(logPath, msg string) (daemonLogLine, bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return daemonLogLine{}, false
	}
	defer f.Close()
	var last daemonLogLine
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"`+msg+`"`)) {
			continue
		}
		var line struct {
			Msg      string          `json:"msg"`
			TS       string          `json:"ts"`
			Took     json.RawMessage `json:"took"`
			Journals int64           `json:"journals"`
			Bytes    int64           `json:"bytes"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != msg {
			continue
		}
		l := daemonLogLine{journals: line.Journals, bytes: line.Bytes}
		// sessiond logs times as ISO 8601 with milliseconds.
		var terr error
		if l.at, terr = time.Parse("2006-01-02T15:04:05.000Z0700", line.TS); terr != nil {
			if l.at, terr = time.Parse(time.RFC3339Nano, line.TS); terr != nil {
				continue
			}
		}
		// zap's JSON encoder writes durations as float seconds by
		// default; accept a duration string too.
		var secs float64
		var str string
		switch {
		case json.Unmarshal(line.Took, &secs) == nil:
			l.took = time.Duration(secs * float64(time.Second))
		case json.Unmarshal(line.Took, &str) == nil:
			d, err := time.ParseDuration(str)
			if err != nil {
				continue
			}
			l.took = d
		default:
			continue
		}
		last, found = l, true
	}
	return last, found
}
