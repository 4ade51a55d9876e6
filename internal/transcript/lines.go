package transcript

import (
	"bytes"
	"errors"
	"io"
	"math"
)

// initialLineBuffer is the LineScanner's first buffer size; it doubles only
// when a single line does not fit.
const initialLineBuffer = 64 << 10

// LineScanner reads a JSONL file line by line. Unlike bufio.Scanner it has no
// line length limit (real transcripts have single lines of 12 MB), yet its
// memory stays bounded by about twice the longest line: the buffer holds at
// most the current line plus what one read brought in, and grows by doubling
// only when one line fills it. Reading a file (NewLineScannerAt), it looks
// ahead for the end of a line that does not fit and grows once to that
// size, so its buffer is about the longest line, not twice it, and no chain
// of outgrown buffers is left for the garbage collector.
//
// Lines are returned as they are on disk: a '\r' before the '\n' stays part
// of the line, and empty lines are returned too.
type LineScanner struct {
	r   io.Reader
	ra  io.ReaderAt // the same stream, by offset; nil when unknown
	buf []byte
	// probe is the look-ahead buffer used with ra.
	probe []byte
	// buf[start:end] is read but not yet returned; buf[start:searched]
	// is known to hold no '\n', so a long line is searched only once
	// however many reads it takes.
	start, searched, end int
	base                 int64 // offset in the stream of buf[0]

	line    []byte
	off     int64
	newline bool

	err  error // from the reader, io.EOF included
	done bool
}

// NewLineScanner returns a LineScanner reading r.
func NewLineScanner(r io.Reader) *LineScanner {
	return &LineScanner{r: r}
}

// NewLineScannerAt returns a LineScanner reading ra from offset 0 to its
// end (a file, or a section of one).
func NewLineScannerAt(ra io.ReaderAt) *LineScanner {
	sr := io.NewSectionReader(ra, 0, math.MaxInt64)
	return &LineScanner{r: sr, ra: sr}
}

// lookAhead returns how many bytes the partial line buf[start:end] needs in
// all, its newline included, by reading ahead with ra (to the end of the
// input for a last line without newline); 0 without ra or on a read error
// (the reads that follow report it).
func (s *LineScanner) lookAhead() int {
	if s.ra == nil {
		return 0
	}
	if s.probe == nil {
		s.probe = make([]byte, 64<<10)
	}
	lineStart := s.base + int64(s.start)
	pos := s.base + int64(s.end)
	for {
		n, err := s.ra.ReadAt(s.probe, pos)
		if n < 0 || n > len(s.probe) {
			return 0
		}
		if i := bytes.IndexByte(s.probe[:n], '\n'); i >= 0 {
			return int(pos + int64(i) + 1 - lineStart)
		}
		pos += int64(n)
		switch {
		case err == io.EOF:
			return int(pos - lineStart)
		case err != nil || n == 0:
			return 0
		}
	}
}

// Scan advances to the next line. It returns false at the end of the input
// or on a read error (see Err).
func (s *LineScanner) Scan() bool {
	if s.done {
		return false
	}
	for {
		if i := bytes.IndexByte(s.buf[s.searched:s.end], '\n'); i >= 0 {
			i += s.searched
			s.setLine(i, true)
			s.start, s.searched = i+1, i+1
			return true
		}
		s.searched = s.end
		if s.err != nil {
			if s.err == io.EOF && s.start < s.end {
				s.setLine(s.end, false) // torn: the writer stopped mid-line
				s.start = s.end
				return true
			}
			s.done = true
			s.line = nil
			return false
		}
		s.fill()
	}
}

func (s *LineScanner) setLine(end int, newline bool) {
	s.line = s.buf[s.start:end]
	s.off = s.base + int64(s.start)
	s.newline = newline
}

// Line returns the current line without its '\n'. It is valid until the
// next call to Scan.
func (s *LineScanner) Line() []byte { return s.line }

// Offset returns the byte offset in the input where the current line starts.
func (s *LineScanner) Offset() int64 { return s.off }

// HasNewline reports whether the current line ends with '\n'. Only the last
// line can lack one: a torn line left by a writer that was killed mid-append.
func (s *LineScanner) HasNewline() bool { return s.newline }

// Err returns the first error the reader returned, other than io.EOF.
func (s *LineScanner) Err() error {
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

// errBadReadCount reports a reader breaking the io.Reader contract.
var errBadReadCount = errors.New("transcript: reader returned an invalid count")

// fill reads more input, first making room: the pending partial line moves
// to the front of the buffer, which doubles only if that line fills it.
func (s *LineScanner) fill() {
	if s.start > 0 {
		n := copy(s.buf, s.buf[s.start:s.end])
		s.base += int64(s.start)
		s.searched -= s.start
		s.end = n
		s.start = 0
	}
	if s.end == len(s.buf) {
		size := max(2*len(s.buf), initialLineBuffer)
		if len(s.buf) > 0 {
			if need := s.lookAhead(); need > len(s.buf) {
				// One byte more, so the read that completes the line
				// does not find the buffer full.
				size = need + 1
			}
		}
		buf := make([]byte, size)
		copy(buf, s.buf[:s.end])
		s.buf = buf
	}
	for empty := 0; empty < 100; empty++ {
		n, err := s.r.Read(s.buf[s.end:])
		if n < 0 || n > len(s.buf)-s.end {
			s.err = errBadReadCount
			return
		}
		s.end += n
		if err != nil {
			s.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	s.err = io.ErrNoProgress
}
