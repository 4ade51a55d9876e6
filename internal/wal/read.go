package wal

import (
	"fmt"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
)

// readChunk is how much of a segment ReadEntries reads at a time.
const readChunk = 1 << 20

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// spanError says a span does not point at an entry of the log.
func (l *Log) spanError(sp Span, why string) error {
	return fmt.Errorf("log: span %d:%d+%d %s: %w", sp.Seg, sp.Off, sp.Len, why, errdefs.ErrInvalidArgument)
}

// check verifies the frame header hdr read at sp and the payload's
// checksum.
func (l *Log) check(s *segment, sp Span, hdr, payload []byte) error {
	h, err := frame.ParseHeader(hdr, l.rules)
	if err != nil || h.Type != typeEntry || int(h.Length) != sp.Len+streamSize {
		return l.spanError(sp, "is not an entry record of that length (wrong span?)")
	}
	if !frame.Verify(s.id, hdr, payload) {
		return fmt.Errorf("log segment %s: entry at offset %d fails its checksum: %w", s.path, sp.Off, errdefs.ErrCorrupt)
	}
	return nil
}

// ReadEntry returns the entry at sp, checked against its checksum. buf is
// used if it is large enough.
func (l *Log) ReadEntry(sp Span, buf []byte) ([]byte, error) {
	s := l.segment(sp.Seg)
	if s == nil {
		return nil, l.spanError(sp, "names a segment the log no longer has")
	}
	n := frame.HeaderSize + streamSize + sp.Len
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if err := frame.ReadFull(s.f, buf, sp.Off); err != nil {
		return nil, fmt.Errorf("log segment %s: %w", s.path, err)
	}
	if err := l.check(s, sp, buf[:frame.HeaderSize], buf[frame.HeaderSize:]); err != nil {
		return nil, err
	}
	return buf[frame.HeaderSize+streamSize:], nil
}

// ReadEntries calls fn with each span's entry in turn, checked against its
// checksum, reading each segment in large sequential chunks. Spans must be
// in log order (segment, then offset), as Append and Epoch give them. The
// entry is valid only during the call; an error from fn stops the walk
// and is returned as is.
func (l *Log) ReadEntries(spans []Span, fn func(i int, entry []byte) error) error {
	var (
		s    *segment
		w    *frame.Window
		bp   *[]byte
		big  []byte
		last Span
	)
	defer func() {
		if bp != nil {
			chunkPool.Put(bp)
		}
	}()
	for i, sp := range spans {
		if i > 0 && (sp.Seg < last.Seg || sp.Seg == last.Seg && sp.Off < last.Off) {
			return l.spanError(sp, "is out of order")
		}
		last = sp
		if s == nil || s.seq != sp.Seg {
			if s = l.segment(sp.Seg); s == nil {
				return l.spanError(sp, "names a segment the log no longer has")
			}
			l.mu.Lock()
			end := s.end
			l.mu.Unlock()
			// A window no larger than what the spans cover: compacting a
			// tiny session must not cost a megabyte.
			if extent := spanExtent(spans[i:]); extent < readChunk {
				w = frame.NewWindow(s.f, end, int(extent))
			} else {
				if bp == nil {
					bp = chunkPool.Get().(*[]byte)
				}
				w = frame.NewWindowBuf(s.f, end, *bp)
			}
		}
		n := frame.HeaderSize + streamSize + sp.Len
		if sp.Len < 0 || sp.Off+int64(n) > w.FileSize() {
			return l.spanError(sp, "is outside its segment")
		}
		var hdr, payload []byte
		if n <= w.BufSize() {
			b, err := w.At(sp.Off, n)
			if err != nil {
				return fmt.Errorf("log segment %s: %w", s.path, errdefs.FromIO(err))
			}
			hdr, payload = b[:frame.HeaderSize], b[frame.HeaderSize:]
		} else {
			if cap(big) < n {
				big = make([]byte, n)
			}
			big = big[:n]
			if err := frame.ReadFull(s.f, big, sp.Off); err != nil {
				return fmt.Errorf("log segment %s: %w", s.path, err)
			}
			hdr, payload = big[:frame.HeaderSize], big[frame.HeaderSize:]
		}
		if err := l.check(s, sp, hdr, payload); err != nil {
			return err
		}
		if streamOf(payload) == 0 {
			return l.spanError(sp, "belongs to no stream")
		}
		if err := fn(i, payload[streamSize:]); err != nil {
			return err
		}
	}
	return nil
}

// spanExtent is how many bytes of the segment of spans[0] the spans in it
// cover, frame headers included, at most readChunk.
func spanExtent(spans []Span) int64 {
	first := spans[0]
	var end int64
	for _, sp := range spans {
		if sp.Seg != first.Seg {
			break
		}
		end = sp.Off + frame.HeaderSize + streamSize + int64(sp.Len)
		if end-first.Off >= readChunk {
			return readChunk
		}
	}
	return max(end-first.Off, frame.HeaderSize)
}
