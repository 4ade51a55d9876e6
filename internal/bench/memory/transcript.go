package memory

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// memFile describes a transcript the scenario wrote.
type memFile struct {
	key     client.Session
	path    string
	bytes   int64
	lines   uint64
	largest int
	sum     [32]byte   // sha256 of the whole file
	tail    [][32]byte // sha256 of each of the last lines, oldest first
}

// memWriteTranscript writes a transcript of about size bytes whose line
// sizes follow dist:agent capped at largest/4, plus one line of largest
// bytes at 3/4 and two of largest/2 at 1/4 and 1/2 of the file (real tool
// results reach 12 MB). The last line is cut so the file has exactly size
// bytes.
func memWriteTranscript(root string, key client.Session, size int64, largest int, tail int, rng *rand.Rand) (*memFile, error) {
	f := &memFile{key: key, path: harness.TranscriptPath(root, key)}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	w := bufio.NewWriterSize(out, memMiB)
	h := sha256.New()
	dist := harness.AgentSizes
	marks := []struct {
		at   int64
		size int
	}{{size / 4, largest / 2}, {size / 2, largest / 2}, {size * 3 / 4, largest}}
	var line []byte
	for f.bytes < size {
		n := min(dist.Size(rng), max(largest/4, harness.MinEntry))
		if len(marks) > 0 && f.bytes >= marks[0].at {
			n = marks[0].size
			marks = marks[1:]
		}
		if left := size - f.bytes - 1; int64(n) > left || left-int64(n) < harness.MinEntry+1 {
			n = int(left) // the last line fills the file exactly
		}
		line = harness.AppendEntry(line[:0], n, key.ID, harness.NewUUID(rng), f.lines)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return nil, err
		}
		h.Write(line)
		lh := sha256.Sum256(line[:len(line)-1])
		if f.tail = append(f.tail, lh); len(f.tail) > tail {
			f.tail = f.tail[1:]
		}
		f.bytes += int64(len(line))
		f.lines++
		f.largest = max(f.largest, len(line)-1)
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	copy(f.sum[:], h.Sum(nil))
	return f, out.Close()
}

// memSink counts (and with verify, hashes) what a reader is served.
type memSink struct {
	h     hash.Hash
	bytes int64
	lines uint64
}

func newMemSink(verify bool) *memSink {
	s := &memSink{}
	if verify {
		s.h = sha256.New()
	}
	return s
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.h != nil {
		s.h.Write(p)
	}
	s.bytes += int64(len(p))
	s.lines += uint64(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}

func (s *memSink) check(f *memFile) error {
	if s.bytes != f.bytes || s.lines != f.lines {
		return fmt.Errorf("%d lines (%d bytes) served, the file holds %d (%d bytes)", s.lines, s.bytes, f.lines, f.bytes)
	}
	if s.h != nil && !bytes.Equal(s.h.Sum(nil), f.sum[:]) {
		return fmt.Errorf("what was served differs from the file (sha256)")
	}
	return nil
}
