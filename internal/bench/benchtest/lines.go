package benchtest

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// CheckLines returns the number of lines of path, each a JSON object of
// size bytes.
func CheckLines(t *testing.T, path string, size int) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("%s: empty or ends without a newline", path)
	}
	var n uint64
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if len(line) != size || !json.Valid([]byte(line)) {
			t.Fatalf("%s line %d: %d bytes, valid JSON %v", path, n+1, len(line), json.Valid([]byte(line)))
		}
		n++
	}
	return n
}

// Float parses a figure of a report's table, failing t if it is not one.
func Float(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return v
}
