package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// Acc is what was acknowledged to one client or in one session.
type Acc struct {
	Entries, Bytes uint64 // bytes include each line's newline
}

// CountLines counts the lines of a JSONL file and its bytes; a last line
// without its newline is an error.
func CountLines(path string) (Acc, error) {
	f, err := os.Open(path)
	if err != nil {
		return Acc{}, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var n Acc
	for {
		line, err := r.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			n.Bytes += uint64(len(line))
			line, err = r.ReadSlice('\n')
		}
		n.Bytes += uint64(len(line))
		if err == io.EOF {
			if len(line) > 0 {
				return n, fmt.Errorf("%s ends with a partial line", path)
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			return n, fmt.Errorf("%s: line without newline", path)
		}
		n.Entries++
	}
}
