package writer

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/trash"
)

// The session of wlTrashMerge, whose agent keeps writing through deletes.
var (
	kMerge    = fixedKey(10, "")
	kMergeSub = fixedKey(10, "subagents/agent-m")
)

// wlTrashMerge: an agent that keeps appending after its session is deleted,
// twice: each delete leaves a copy in the trash and the next append
// recreates the session; then restore --all merges both copies into the
// live session (the main transcript into a file that exists, the
// subagent's, recreated between the deletes, into one that does not), and
// the agent goes on. Every acknowledged entry must be in exactly one place
// (the trash copies, oldest first, then the live file, read as one
// transcript), each caller's batches in order: so a restore cut short
// anywhere leaves the session as it was or as restored, with no entry lost
// or twice, and once restored the trashed entries come first.
func wlTrashMerge() *workload {
	wl := &workload{
		name:  "trash-merge",
		probe: []layout.Key{kMerge, kBy},
	}
	deletes := []string{"delete 1", "delete 2"}
	del := func(w *world, name string) bool {
		w.setFlag(name + " started")
		if w.do(name, func() error { _, err := w.m.Trash().Delete(w.ctx, kMerge, false); return err }) != nil {
			return false
		}
		w.setFlag(name + " done")
		return true
	}
	restore := func(w *world) error {
		w.setFlag("restore started")
		_, err := w.m.Trash().RestoreCopies(w.ctx, kMerge, trash.RestoreOptions{All: true})
		if err == nil {
			w.setFlag("restored")
		}
		return err
	}
	wl.run = func(w *world) {
		w.append(0, kMerge, line(kMerge, w.id(), "x1"), line(kMerge, "", "x2"))
		w.append(0, kMergeSub, line(kMergeSub, w.id(), "s1"))
		w.append(1, kBy, line(kBy, w.id(), "by1"))
		// A failed call stops the agent: the session refuses appends until
		// the interrupted delete or restore is finished (heal).
		if !del(w, deletes[0]) {
			return
		}
		w.append(0, kMerge, line(kMerge, w.id(), "y1"), line(kMerge, "", "y2"))
		w.append(0, kMergeSub, line(kMergeSub, w.id(), "s2"))
		if !del(w, deletes[1]) {
			return
		}
		w.append(0, kMerge, line(kMerge, w.id(), "z1"))
		if w.do("restore --all", func() error { return restore(w) }) != nil {
			return
		}
		w.append(0, kMerge, line(kMerge, w.id(), "z2"))
		w.append(1, kBy, line(kBy, w.id(), "by2"))
	}
	// A delete or restore that failed is retried until done: a session
	// must never stay half in the trash.
	wl.heal = func(w *world) []string {
		for _, d := range deletes {
			if w.flag(d+" started") && !w.flag(d+" done") {
				_, err := w.m.Trash().Delete(w.ctx, kMerge, false)
				if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					return []string{fmt.Sprintf("retried %s: %v", d, err)}
				}
				w.setFlag(d + " done")
			}
		}
		if w.flag("restore started") && !w.flag("restored") {
			if err := restore(w); err != nil {
				return []string{fmt.Sprintf("retried restore --all: %v", err)}
			}
		}
		return nil
	}
	wl.locate = func(w *world, v *fstest.CrashFS, key layout.Key) ([]byte, bool, []string) {
		var data []byte
		found := false
		for _, p := range mergePlaces(v, key) {
			if b, err := v.ReadFile(p); err == nil {
				data, found = append(data, b...), true
			}
		}
		return data, found, nil
	}
	wl.check = func(w *world, v *fstest.CrashFS) []string {
		places := mergePlaces(v, kMerge)
		if w.flag("restored") && len(places) > 1 {
			return []string{fmt.Sprintf("restore --all returned but copies are left in the trash: %v", places[:len(places)-1])}
		}
		return nil
	}
	return wl
}

// mergePlaces lists where key's transcript may lie: in each trash entry
// of kMerge's session, oldest first, then in place.
func mergePlaces(v *fstest.CrashFS, key layout.Key) []string {
	root := path.Join(crashLayout.StateDir, "trash", key.ProjectKey)
	var out []string
	for _, p := range v.Walk(root) {
		rest, ok := strings.CutPrefix(p, root+"/")
		if !ok || strings.Count(rest, "/") != 1 || !strings.HasSuffix(rest, "/") || !strings.HasPrefix(rest, key.SessionID+"-") {
			continue
		}
		f := path.Join(p, key.SessionID+".jsonl")
		if key.Subpath != "" {
			f = path.Join(p, key.SessionID, key.Subpath+".jsonl")
		}
		if _, err := v.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return append(out, crashLayout.TranscriptPath(key))
}
