package journal

import (
	"fmt"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
)

// readChunk is how much of a segment ReadEntries reads at a time.
const readChunk = 1 << 20

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// smallRead is the largest run read into a smallPool buffer: most runs,
// a session's entries being a few KiB apart among other sessions'.
const smallRead = 64 << 10

var smallPool = sync.Pool{New: func() any { b := make([]byte, smallRead); return &b }}

// spanError says a span does not point at an entry of the journal.
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
		return fmt.Errorf("journal segment %s: entry at offset %d fails its checksum: %w", s.path, sp.Off, errdefs.ErrCorrupt)
	}
	return nil
}

// ReadSize is the buffer ReadEntry needs for sp's entry: a smaller one is
// not used.
func ReadSize(sp Span) int { return frame.HeaderSize + streamSize + sp.Len }

// ReadEntry returns the entry at sp, checked against its checksum. buf is
// used if it is large enough (ReadSize).
func (l *Log) ReadEntry(sp Span, buf []byte) ([]byte, error) {
	s := l.segment(sp.Seg)
	if s == nil {
		return nil, l.spanError(sp, "names a segment the journal no longer has")
	}
	n := ReadSize(sp)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if err := frame.ReadFull(s.f, buf, sp.Off); err != nil {
		return nil, fmt.Errorf("journal segment %s: %w", s.path, err)
	}
	if err := l.check(s, sp, buf[:frame.HeaderSize], buf[frame.HeaderSize:]); err != nil {
		return nil, err
	}
	return buf[frame.HeaderSize+streamSize:], nil
}

// ReadEntries calls fn with each span's entry in turn, checked against its
// checksum. Spans must be in log order (segment, then offset), as Append
// and Epoch give them. The entry is valid only during the call; an error
// from fn stops the walk and is returned as is.
//
// A session's entries are scattered through the shared log among every
// other session's, so reads are planned from the spans themselves: spans
// less than readGap apart are read with one pread (up to readChunk), and
// nothing else is. (Reading a fixed window from each span read a megabyte
// per entry of a session whose neighbours in the journal were other
// sessions': compacting one session of a busy fleet read 60 MiB.)
func (l *Log) ReadEntries(spans []Span, fn func(i int, entry []byte) error) error {
	var (
		bp, sp *[]byte
		big    []byte
		last   Span
	)
	defer func() {
		if bp != nil {
			chunkPool.Put(bp)
		}
		if sp != nil {
			smallPool.Put(sp)
		}
	}()
	frameLen := func(sp Span) int64 { return frame.HeaderSize + streamSize + int64(sp.Len) }
	for i := 0; i < len(spans); {
		first := spans[i]
		if i > 0 && (first.Seg < last.Seg || first.Seg == last.Seg && first.Off < last.Off) {
			return l.spanError(first, "is out of order")
		}
		s := l.segment(first.Seg)
		if s == nil {
			return l.spanError(first, "names a segment the journal no longer has")
		}
		l.mu.Lock()
		segEnd := s.end
		l.mu.Unlock()
		// The run: spans[i:j] of this segment, each near the previous.
		start, end := first.Off, first.Off+frameLen(first)
		j := i + 1
		for ; j < len(spans); j++ {
			sp := spans[j]
			if sp.Seg != first.Seg || sp.Off < end || sp.Off-end > readGap || sp.Off+frameLen(sp)-start > readChunk {
				break
			}
			end = sp.Off + frameLen(sp)
		}
		for _, sp := range spans[i:j] {
			if sp.Len < 0 || sp.Off < 0 || sp.Off+frameLen(sp) > segEnd {
				return l.spanError(sp, "is outside its segment")
			}
		}
		var buf []byte
		switch n := end - start; {
		case n <= smallRead:
			if sp == nil {
				sp = smallPool.Get().(*[]byte)
			}
			buf = (*sp)[:n]
		case n <= readChunk:
			if bp == nil {
				bp = chunkPool.Get().(*[]byte)
			}
			buf = (*bp)[:n]
		default: // one entry larger than a chunk
			if int64(cap(big)) < n {
				big = make([]byte, n)
			}
			buf = big[:n]
		}
		if err := frame.ReadFull(s.f, buf, start); err != nil {
			return fmt.Errorf("journal segment %s: %w", s.path, err)
		}
		for k := i; k < j; k++ {
			sp := spans[k]
			b := buf[sp.Off-start : sp.Off-start+frameLen(sp)]
			hdr, payload := b[:frame.HeaderSize], b[frame.HeaderSize:]
			if err := l.check(s, sp, hdr, payload); err != nil {
				return err
			}
			if streamOf(payload) == 0 {
				return l.spanError(sp, "belongs to no stream")
			}
			if err := fn(k, payload[streamSize:]); err != nil {
				return err
			}
		}
		last = spans[j-1]
		i = j
	}
	return nil
}

// readGap is the largest hole between two spans ReadEntries reads through
// rather than issuing another pread: about what a pread's own cost copies.
// (At 64 KiB, compacting one of 64 sessions written at once read every
// other session's entries too, 64 times its own bytes: 15% of the
// daemon's CPU in that benchmark.)
const readGap = 8 << 10
