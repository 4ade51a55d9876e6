package transcript

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

type scannedLine struct {
	text    string
	off     int64
	newline bool
}

func scanAll(t *testing.T, r io.Reader) []scannedLine {
	t.Helper()
	s := NewLineScanner(r)
	var got []scannedLine
	for s.Scan() {
		got = append(got, scannedLine{string(s.Line()), s.Offset(), s.HasNewline()})
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v", err)
	}
	if s.Scan() {
		t.Fatal("Scan returned true after returning false")
	}
	return got
}

// checkScanned compares lines scanned with the lines expected, by their
// lengths (the lines may be long), offsets and newlines.
func checkScanned(t *testing.T, got, want []scannedLine) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %d bytes at %d newline %v; want %d bytes at %d newline %v", i,
				len(got[i].text), got[i].off, got[i].newline, len(want[i].text), want[i].off, want[i].newline)
		}
	}
}

func TestLineScanner(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []scannedLine
	}{
		{"empty input", "", nil},
		{"one line", "a\n", []scannedLine{{"a", 0, true}}},
		{"torn last line", "a\nbc", []scannedLine{{"a", 0, true}, {"bc", 2, false}}},
		{"only a torn line", "{\"type\":", []scannedLine{{"{\"type\":", 0, false}}},
		{"empty lines", "\n\na\n\n", []scannedLine{{"", 0, true}, {"", 1, true}, {"a", 2, true}, {"", 4, true}}},
		{"CRLF kept", "a\r\nb\r\n\r\n", []scannedLine{{"a\r", 0, true}, {"b\r", 3, true}, {"\r", 6, true}}},
		{"lone CR is not a line end", "a\rb\n", []scannedLine{{"a\rb", 0, true}}},
		{"NUL block", "{}\n\x00\x00\x00", []scannedLine{{"{}", 0, true}, {"\x00\x00\x00", 3, false}}},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, c := range cases {
		for rname, wrap := range readers {
			t.Run(c.name+"/"+rname, func(t *testing.T) {
				got := scanAll(t, wrap(strings.NewReader(c.in)))
				if len(got) != len(c.want) {
					t.Fatalf("got %d lines %+v, want %+v", len(got), got, c.want)
				}
				for i := range got {
					if got[i] != c.want[i] {
						t.Errorf("line %d = %+v, want %+v", i, got[i], c.want[i])
					}
				}
			})
		}
	}
}

// TestLineScannerLongLines reads 12 MB lines, the largest seen in real
// transcripts, between short ones: every line must come back whole, and the
// buffer must stay within twice the longest line plus the first 64 KiB.
func TestLineScannerLongLines(t *testing.T) {
	const long = 12 << 20
	big := bytes.Repeat([]byte("0123456789abcdef"), long/16)
	big[0], big[len(big)-1] = '{', '}'
	r := io.MultiReader(
		strings.NewReader("{\"first\":1}\n"),
		bytes.NewReader(big), strings.NewReader("\n"),
		strings.NewReader("{\"short\":2}\r\n"),
		bytes.NewReader(big), strings.NewReader("\n"),
		bytes.NewReader(big[:long/2]), // torn in the middle of a long line
	)
	s := NewLineScanner(r)
	type want struct {
		line    []byte
		newline bool
	}
	wants := []want{{[]byte("{\"first\":1}"), true}, {big, true}, {[]byte("{\"short\":2}\r"), true}, {big, true}, {big[:long/2], false}}
	var off int64
	for i, w := range wants {
		if !s.Scan() {
			t.Fatalf("line %d: Scan stopped: %v", i, s.Err())
		}
		if !bytes.Equal(s.Line(), w.line) || s.HasNewline() != w.newline || s.Offset() != off {
			t.Fatalf("line %d: %d bytes at offset %d newline %v; want %d bytes at %d newline %v",
				i, len(s.Line()), s.Offset(), s.HasNewline(), len(w.line), off, w.newline)
		}
		off += int64(len(w.line)) + 1
		if limit := 2*long + initialLineBuffer; cap(s.buf) > limit {
			t.Fatalf("line %d: buffer is %d bytes, over %d (2 x longest line + 64 KiB)", i, cap(s.buf), limit)
		}
	}
	if s.Scan() || s.Err() != nil {
		t.Fatalf("extra line or error: %v", s.Err())
	}
	t.Logf("buffer after 12 MB lines: %d bytes", cap(s.buf))
}

// TestLineScannerOneByteReads feeds a long line one byte at a time: each
// byte must be searched once, not once per read (that would be quadratic).
func TestLineScannerOneByteReads(t *testing.T) {
	line := strings.Repeat("x", 300<<10)
	in := "a\n" + line + "\n" + line
	got := scanAll(t, iotest.OneByteReader(strings.NewReader(in)))
	want := []scannedLine{{"a", 0, true}, {line, 2, true}, {line, int64(3 + len(line)), false}}
	checkScanned(t, got, want)
}

// TestLineScannerReusesBuffer checks that short lines cost no allocation
// beyond the scanner and its one buffer.
func TestLineScannerReusesBuffer(t *testing.T) {
	in := []byte(strings.Repeat(`{"type":"progress","uuid":"0b7e3c1a-2f4d-4e5b-9c6a-8d7f1e2a3b4c"}`+"\n", 20000))
	allocs := testing.AllocsPerRun(5, func() {
		s := NewLineScanner(bytes.NewReader(in))
		n := 0
		for s.Scan() {
			n++
		}
		if n != 20000 {
			t.Fatalf("%d lines", n)
		}
	})
	if allocs > 3 {
		t.Errorf("%v allocations to scan %d bytes of short lines; want at most 3", allocs, len(in))
	}
}

func TestLineScannerReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	r := io.MultiReader(strings.NewReader("a\nb\npartial"), iotest.ErrReader(boom))
	s := NewLineScanner(r)
	var got []string
	for s.Scan() {
		got = append(got, string(s.Line()))
	}
	if !errors.Is(s.Err(), boom) {
		t.Fatalf("Err() = %v, want %v", s.Err(), boom)
	}
	// "partial" is not known to be torn: the file may go on past the error.
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("lines %q, want a, b", got)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestLineScannerNoProgress(t *testing.T) {
	s := NewLineScanner(emptyReader{})
	if s.Scan() || !errors.Is(s.Err(), io.ErrNoProgress) {
		t.Fatalf("Err() = %v, want io.ErrNoProgress", s.Err())
	}
}

// TestLineScannerAtSizesBufferToLine: reading a file by offset, the
// scanner returns exactly what NewLineScanner does (torn last line
// included), and a long line grows the buffer once, to about the line,
// instead of doubling past it.
func TestLineScannerAtSizesBufferToLine(t *testing.T) {
	const long = 12<<20 + 123
	big := bytes.Repeat([]byte("x"), long)
	var in []byte
	in = append(in, "{\"first\":1}\n"...)
	in = append(in, big...)
	in = append(in, '\n')
	in = append(in, "{\"short\":2}\r\n"...)
	in = append(in, big[:long/3]...)
	in = append(in, '\n')
	in = append(in, big[:long/2]...) // torn, longer than the buffer
	want := scanAll(t, bytes.NewReader(in))

	s := NewLineScannerAt(bytes.NewReader(in))
	var got []scannedLine
	grown := 0
	last := 0
	for s.Scan() {
		got = append(got, scannedLine{string(s.Line()), s.Offset(), s.HasNewline()})
		if cap(s.buf) != last {
			grown++
			last = cap(s.buf)
		}
		if cap(s.buf) > len(s.Line())+initialLineBuffer && cap(s.buf) > long+initialLineBuffer {
			t.Fatalf("line %d of %d bytes: buffer %d bytes, over the longest line + 64 KiB", len(got), len(s.Line()), cap(s.buf))
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	checkScanned(t, got, want)
	if cap(s.buf) > long+initialLineBuffer {
		t.Fatalf("buffer ended at %d bytes for a longest line of %d", cap(s.buf), long)
	}
	// 64 KiB, then straight to the 12 MB line.
	if grown > 2 {
		t.Fatalf("buffer grew %d times; want 2 (first fill, then once to the long line)", grown)
	}
}
