package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// LookupInfo says how far back the journal reaches.
type LookupInfo struct {
	// Since is when the oldest retained segment was let go; zero when no
	// segment is retained. Entries compacted before it (by more than a
	// segment's worth) are no longer in the journal.
	Since time.Time
}

// Lookup reads back entries by the spans Append gave them, from the live
// segments or the retained ones (see retain.go), long after their streams
// were compacted and superseded: a transcript's record of what it was
// given (its spans) finds the bytes again while the journal keeps them. A
// span's Len may be 0 (not known): the frame says it. Each entry is
// checked against its checksum, seeded with its segment's id, so a span
// never reads anything but the entry logged there. fn is called, in the
// order of spans, for each entry found; spans whose segment the journal no
// longer has are skipped, and so are spans that do not point at an entry
// (not this log's). The entry is valid only during the call; an error from
// fn stops the lookup and is returned as is.
//
// While Lookup runs, nothing is collected or expired, so the segments it
// reads stay: it is meant for repair and check, not for a hot path.
func (l *Log) Lookup(spans []Span, fn func(i int, entry []byte) error) (LookupInfo, error) {
	info, retained, err := l.startLookup()
	if err != nil {
		return info, err
	}
	defer func() {
		l.mu.Lock()
		l.readers--
		l.mu.Unlock()
	}()
	files := &lookupFiles{l: l, retained: retained, open: map[uint64]*lookupFile{}}
	defer files.close()
	var hdr [frame.HeaderSize]byte
	var buf []byte
	for i, sp := range spans {
		o, err := files.get(sp.Seg)
		if err != nil {
			return info, err
		}
		if o == nil || sp.Off < 0 || sp.Off+frame.HeaderSize > o.end {
			continue
		}
		if err := frame.ReadFull(o.f, hdr[:], sp.Off); err != nil {
			return info, err
		}
		h, err := frame.ParseHeader(hdr[:], l.rules)
		if err != nil || h.Type != typeEntry || int(h.Length) < streamSize || sp.Len > 0 && int(h.Length) != sp.Len+streamSize ||
			sp.Off+h.Size() > o.end {
			continue
		}
		if cap(buf) < int(h.Length) {
			buf = make([]byte, h.Length)
		}
		payload := buf[:h.Length]
		if err := frame.ReadFull(o.f, payload, sp.Off+frame.HeaderSize); err != nil {
			return info, err
		}
		if !frame.Verify(o.id, hdr[:], payload) || streamOf(payload) == 0 {
			continue
		}
		if err := fn(i, payload[streamSize:]); err != nil {
			return info, err
		}
	}
	return info, nil
}

// startLookup registers a reader (the caller undoes it), so nothing is
// collected or expired meanwhile, and returns how far back the journal
// reaches and where each retained segment is.
func (l *Log) startLookup() (LookupInfo, map[uint64]string, error) {
	var info LookupInfo
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return info, nil, fmt.Errorf("log is closed: %w", errdefs.ErrUnavailable)
	}
	l.readers++
	if len(l.retained) > 0 {
		info.Since = l.retained[0].at
	}
	retained := make(map[uint64]string, len(l.retained))
	for _, r := range l.retained {
		retained[r.seq] = r.path
	}
	return info, retained, nil
}

// lookupFile is a segment a lookup reads.
type lookupFile struct {
	f   fsys.File
	id  uint64
	end int64
	own bool // opened by the lookup, closed at its end
}

// lookupFiles are the segments one lookup opened, by sequence number (nil:
// not there, or not a segment of this log).
type lookupFiles struct {
	l        *Log
	retained map[uint64]string
	open     map[uint64]*lookupFile
}

func (lf *lookupFiles) close() {
	for _, o := range lf.open {
		if o != nil && o.own {
			o.f.Close()
		}
	}
}

// get returns segment seq, live or retained, opening it the first time;
// nil if the journal no longer has it.
func (lf *lookupFiles) get(seq uint64) (*lookupFile, error) {
	if o, ok := lf.open[seq]; ok {
		return o, nil
	}
	lf.open[seq] = nil
	l := lf.l
	if s := l.segment(seq); s != nil {
		l.mu.Lock()
		o := &lookupFile{f: s.f, id: s.id, end: s.end}
		l.mu.Unlock()
		if o.f == nil {
			return nil, nil
		}
		lf.open[seq] = o
		return o, nil
	}
	path, ok := lf.retained[seq]
	if !ok {
		return nil, nil
	}
	f, err := l.opt.FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("open journal segment %s: %w", path, err))
	}
	o := &lookupFile{f: f, own: true}
	lf.open[seq] = o
	fi, err := f.Stat()
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("read journal segment %s: %w", path, err))
	}
	o.end = fi.Size()
	w := frame.NewWindow(f, o.end, int(min(max(o.end, frame.HeaderSize), 64<<10)))
	h, _, err := readHeader(w)
	switch {
	case err != nil && !frame.IsError(err):
		return nil, errdefs.FromIO(fmt.Errorf("read journal segment %s: %w", path, err))
	case err != nil || h.Seq != seq:
		f.Close()
		lf.open[seq] = nil // not a segment of this log: nothing in it counts
		return nil, nil
	}
	o.id = h.ID
	return o, nil
}
