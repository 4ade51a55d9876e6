package files

import (
	"strings"
	"sync"

	"github.com/sessiond/sessiond/internal/fsys"
)

// StaleTemps finds the temp files a crashed daemon left behind. Only a
// process that died leaves one (a live writer removes its own, whether its
// rewrite succeeded or not), so the temp files that matter are those a
// folder held when this process first looked at it. (A temp file whose
// removal failed in this process stays until the next start.) Each folder is listed
// once, at the first open of a transcript in it, and each writer then
// takes its own names from that list. Listing the folder at every open
// cost a project of 1,000 sessions 1,000 listings of 1,000 names as its
// agents started.
type StaleTemps struct {
	mu     sync.Mutex
	listed map[string]map[string]struct{} // folder -> temp names seen at its first listing, not taken yet
}

// Take returns the names matching match that dir held when this Env
// first listed it, and forgets them. A folder that cannot be listed is
// tried again next time.
func (t *StaleTemps) Take(fs fsys.FS, dir string, match func(string) bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names, ok := t.listed[dir]
	if !ok {
		ents, err := fs.ReadDir(dir)
		if err != nil {
			return nil
		}
		names = make(map[string]struct{})
		for _, e := range ents {
			// Every temp file sessiond writes starts with a dot and ends
			// in ".tmp"; the list keeps nothing else.
			if n := e.Name(); strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp") {
				names[n] = struct{}{}
			}
		}
		if t.listed == nil {
			t.listed = make(map[string]map[string]struct{})
		}
		t.listed[dir] = names
	}
	var out []string
	for n := range names {
		if match(n) {
			out = append(out, n)
			delete(names, n)
		}
	}
	return out
}
