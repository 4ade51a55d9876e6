package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// HistoryInfo says how far back History could read.
type HistoryInfo struct {
	// Segments is how many segment files were read, retained ones
	// included.
	Segments int
	// Since is when the oldest retained segment was let go; zero when no
	// segment is retained. Entries compacted before it (by more than a
	// segment's worth) are no longer in the log.
	Since time.Time
}

// History calls fn with every committed entry the log still holds for key,
// and where it lies (the Span Append gave it: retained segments keep their
// seq)
// (retained segments first, then the live ones; superseded streams, whose
// entries are already compacted, included), in the order they were
// logged: the order they were acknowledged in. A stream is known by its
// Bind record, so the entries of a stream whose Bind was in a segment
// already gone are not found. Reading stops quietly at the first record
// that does not validate in a segment (its unwritten or torn end). The
// entry is valid only during the call; an error from fn stops the walk
// and is returned as is.
//
// While History runs, nothing is collected or expired, so the segments it
// lists stay: it is meant for repair, not for a hot path.
func (l *Log) History(key layout.Key, fn func(sp Span, entry []byte) error) (HistoryInfo, error) {
	type part struct {
		seq  uint64
		path string
		f    fsys.File // a live segment's handle
		end  int64     // where its last synced write ends; -1: the file's size
	}
	var info HistoryInfo
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return info, fmt.Errorf("log is closed: %w", errdefs.ErrUnavailable)
	}
	l.readers++
	var parts []part
	for _, r := range l.retained {
		parts = append(parts, part{seq: r.seq, path: r.path, end: -1})
	}
	if len(l.retained) > 0 {
		info.Since = l.retained[0].at
	}
	for _, s := range l.segs {
		parts = append(parts, part{seq: s.seq, path: s.path, f: s.f, end: s.end})
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.readers--
		l.mu.Unlock()
	}()
	h := &historian{l: l, key: key, fn: fn, streams: map[uint64]bool{}, pending: map[uint64][]pendingEntry{}}
	for _, p := range parts {
		f := p.f
		if f == nil {
			var err error
			f, err = l.opt.FS.OpenFile(p.path, os.O_RDONLY, 0)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return info, errdefs.FromIO(fmt.Errorf("open log segment %s: %w", p.path, err))
			}
		}
		err := h.segment(f, p.path, p.seq, p.end)
		if p.f == nil {
			f.Close()
		}
		if err != nil {
			return info, err
		}
		info.Segments++
	}
	return info, nil
}

// historian is History's walk: the streams bound to its transcript, and
// their entries waiting for a commit.
type historian struct {
	l       *Log
	key     layout.Key
	fn      func(Span, []byte) error
	streams map[uint64]bool // stream -> bound to key
	pending map[uint64][]pendingEntry
	seq     uint64 // the segment being read
}

type pendingEntry struct {
	sp Span
	e  []byte
}

// segment reads the records of segment seq up to end (-1: the file's
// size): its header first (its id seeds every checksum), then its records
// up to the first that fails.
func (h *historian) segment(f fsys.File, path string, seq uint64, end int64) error {
	if end < 0 {
		fi, err := f.Stat()
		if err != nil {
			return errdefs.FromIO(fmt.Errorf("read log segment %s: %w", path, err))
		}
		end = fi.Size()
	}
	w := frame.NewWindow(f, end, int(min(max(end, frame.HeaderSize), windowSize)))
	sh, start, err := readHeader(w)
	if err != nil || sh.Seq != seq {
		if err != nil && !frame.IsError(err) {
			return errdefs.FromIO(fmt.Errorf("read log segment %s: %w", path, err))
		}
		return nil // not a segment of this log: nothing in it counts
	}
	rules := h.l.rules
	clear(h.pending)
	h.seq = seq
	for off := start; off < end; {
		hd, err := frame.Read(w, off, sh.ID, rules)
		if err != nil {
			if !frame.IsError(err) {
				return errdefs.FromIO(fmt.Errorf("read log segment %s: %w", path, err))
			}
			return nil
		}
		if err := h.record(f, w, hd, off); err != nil {
			return err
		}
		off += hd.Size()
	}
	return nil
}

func (h *historian) record(f fsys.File, w *frame.Window, hd frame.Header, off int64) error {
	body := off + frame.HeaderSize
	switch hd.Type {
	case typeBind:
		p, err := w.At(body, int(hd.Length))
		if err != nil {
			return nil
		}
		b, err := decodeBind(p)
		if err != nil {
			return nil
		}
		h.streams[b.Stream] = b.key() == h.key
	case typeEntry:
		if hd.Length < streamSize {
			return nil
		}
		p, err := w.At(body, streamSize)
		if err != nil {
			return nil
		}
		id := streamOf(p)
		if !h.streams[id] {
			return nil
		}
		e := make([]byte, int(hd.Length)-streamSize)
		if err := frame.ReadFull(f, e, body+streamSize); err != nil {
			return err
		}
		h.pending[id] = append(h.pending[id], pendingEntry{Span{Seg: h.seq, Off: off, Len: len(e)}, e})
	case typeCommit:
		if hd.Length != commitSize {
			return nil
		}
		p, err := w.At(body, commitSize)
		if err != nil {
			return nil
		}
		id, _, count := decodeCommit(p)
		entries := h.pending[id]
		delete(h.pending, id)
		if !h.streams[id] || len(entries) != count {
			return nil
		}
		for _, e := range entries {
			if err := h.fn(e.sp, e.e); err != nil {
				return err
			}
		}
	}
	return nil
}
