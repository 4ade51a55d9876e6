package main

import "testing"

// TestProgressOn: a bar only on a terminal and never with --json, unless
// --progress says otherwise.
func TestProgressOn(t *testing.T) {
	for _, c := range []struct {
		mode           string
		json, terminal bool
		want           bool
	}{
		{"auto", false, true, true},
		{"auto", false, false, false},
		{"auto", true, true, false},
		{"always", true, false, true},
		{"never", false, true, false},
	} {
		if got := progressOn(c.mode, c.json, c.terminal); got != c.want {
			t.Errorf("progressOn(%q, json %v, terminal %v) = %v, want %v", c.mode, c.json, c.terminal, got, c.want)
		}
	}
}
