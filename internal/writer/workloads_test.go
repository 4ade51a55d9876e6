package writer

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

// The sessions of the workloads. kBy is the bystander: a session of the
// same Manager that every workload also writes to, which nothing may
// disturb.
var (
	kGroup    = fixedKey(1, "")
	kBy       = fixedKey(2, "")
	kCompact  = fixedKey(3, "")
	kSrc      = fixedKey(4, "")
	kFork     = fixedKey(5, "")
	kRepair   = fixedKey(6, "")
	kDel      = fixedKey(7, "")
	kDelSub   = fixedKey(7, "subagents/agent-a")
	kStore    = fixedKey(8, "")
	kStoreSub = fixedKey(8, "subagents/agent-s")
	kRewrite  = fixedKey(9, "")
)

func allWorkloads() []*workload {
	return []*workload{wlGroupCommit(), wlCompaction(), wlFork(), wlRepair(), wlDeleteRestore(), wlTrashMerge(), wlStore(), wlForeignRewrite(), wlSharedFile()}
}

// wlForeignRewrite: entries compacted in two compactions (segments small
// enough to roll, so the journal retains them), another program's truncating
// save of the transcript (open("w"): its stale copy, shorter, and a line
// of its own, synced), an entry appended after it, then repair and a
// flush. Whatever the crash or fault, once recovered and repaired (settle)
// every acknowledged entry is in the file once, in order (the harness's
// checks), the program's line too once its save was synced, and check
// finds nothing missing.
func wlForeignRewrite() *workload {
	return &workload{
		name:  "foreign-rewrite",
		cfg:   func(c *Config) { c.JournalSegmentSize = 1500 },
		probe: []layout.Key{kRewrite, kBy},
		run: func(w *world) {
			w.append(0, kRewrite, line(kRewrite, w.id(), "r1"), line(kRewrite, "", "r2"), line(kRewrite, w.id(), "r3"))
			w.flush(kRewrite)
			w.append(0, kRewrite, line(kRewrite, w.id(), "r4"), line(kRewrite, "", "r5"))
			w.flush(kRewrite)
			w.append(1, kBy, line(kBy, w.id(), "by1"))
			w.foreignSave(kRewrite, 2, line(kRewrite, w.id(), "the other program's"))
			w.append(0, kRewrite, line(kRewrite, w.id(), "r6"))
			if w.do("repair", func() error { _, err := w.m.Repairs().Repair(w.ctx, kRewrite, false); return err }) == nil {
				w.setFlag("repaired")
			}
			w.flush(kRewrite)
		},
		settle: func(w *world, m *Manager) []string {
			if _, err := m.Repairs().Repair(w.ctx, kRewrite, false); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return []string{fmt.Sprintf("repair after recovery: %v", err)}
			}
			return nil
		},
		heal: func(w *world) []string {
			if _, err := w.m.Repairs().Repair(w.ctx, kRewrite, false); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return []string{fmt.Sprintf("retried repair: %v", err)}
			}
			return nil
		},
		check: func(w *world, v *fstest.CrashFS) []string {
			m := newCrashManager(w.t, v.KillClone(), w.wl)
			defer closeQuietly(m)
			if _, err := m.Recover(w.ctx); err != nil {
				return []string{fmt.Sprintf("foreign-rewrite check: recover: %v", err)}
			}
			res, err := m.Repairs().Check(w.ctx, kRewrite)
			if errors.Is(err, errdefs.ErrNotFound) && !w.hasAcked(kRewrite) {
				return nil
			}
			if err != nil {
				return []string{fmt.Sprintf("foreign-rewrite check: %v", err)}
			}
			for _, p := range res.Report.Problems {
				if p.Kind == damage.KindAcknowledgedMissing {
					return []string{fmt.Sprintf("after repair check still finds acknowledged entries missing: %s", p.Message)}
				}
			}
			return nil
		},
	}
}

// storeAgentMeta is an agent_metadata entry as the SDK mirrors it.
func storeAgentMeta(finished bool) string {
	return fmt.Sprintf(`{"type":"agent_metadata","agentType":"general-purpose","finished":%v}`, finished)
}

// wlStore: SessionStore appends, as the adapters send them: uuid-less
// entries in batches with ids, each resent once (the answer to the first
// send lost) and each carrying the summary folded from the last one; the
// size rule compacts between them, so batch ids and summaries move from the
// journal to the sidecar; then a flush. After recovery every acknowledged
// batch, resent, must store nothing, and the summary must be the last one
// acknowledged (or a later one that reached the disk), never older.
func wlStore() *workload {
	return &workload{
		name:           "store",
		cfg:            func(c *Config) { c.MinCompactBytes = 1 },
		appendsCompact: true,
		probe:          []layout.Key{kStore, kBy, kStoreSub},
		run: func(w *world) {
			w.storeBatches, w.storeSummaries = map[string]*sent{}, map[uint64]string{}
			w.append(0, kBy, line(kBy, w.id(), "by0"))
			// A subagent whose metadata the SDK mirrors as entries: the
			// last one becomes its .meta.json.
			w.storeBatches["sub-0"], _, _ = w.appendOpt(2, kStoreSub, AppendOptions{BatchID: "sub-0"}, storeAgentMeta(false), line(kStoreSub, "", "sub0"))
			w.storeBatches["sub-1"], _, _ = w.appendOpt(2, kStoreSub, AppendOptions{BatchID: "sub-1"}, line(kStoreSub, "", "sub1"), storeAgentMeta(true))
			version := uint64(0)
			for i := 0; i < 4; i++ {
				id, data := fmt.Sprintf("batch-%d", i), fmt.Sprintf(`{"n":%d}`, i+1)
				w.storeSummaries[version+1] = data
				opt := AppendOptions{BatchID: id, Summary: &SummaryUpdate{Data: []byte(data), ExpectedVersion: version}}
				b, res, err := w.appendOpt(1, kStore, opt, line(kStore, "", fmt.Sprintf("s%d", i)), line(kStore, "", fmt.Sprintf("s%d-b", i)))
				w.storeBatches[id] = b
				if err != nil {
					return
				}
				version = res.SummaryVersion
				// The resend: not recorded as sent, it must store nothing.
				raw := [][]byte{[]byte(b.lines[0]), []byte(b.lines[1])}
				if r, err := w.m.AppendBatch(w.ctx, kStore, raw, opt); err == nil && !r.DuplicateBatch {
					w.t.Errorf("resent batch %s stored again: %+v", id, r)
				}
			}
			w.flush(kStore)
		},
		check: func(w *world, v *fstest.CrashFS) []string {
			vc := v.KillClone()
			m := newCrashManager(w.t, vc, w.wl)
			defer closeQuietly(m)
			if _, err := m.Recover(w.ctx); err != nil {
				return []string{fmt.Sprintf("store check: recover: %v", err)}
			}
			var probs []string
			var lastAcked uint64
			for i := 0; ; i++ {
				id := fmt.Sprintf("batch-%d", i)
				b := w.storeBatches[id]
				if b == nil {
					break
				}
				if !b.acked {
					continue
				}
				lastAcked = uint64(i + 1)
				r, err := m.AppendBatch(w.ctx, kStore, [][]byte{[]byte(b.lines[0]), []byte(b.lines[1])}, AppendOptions{BatchID: id})
				if err != nil || !r.DuplicateBatch {
					probs = append(probs, fmt.Sprintf("acknowledged batch %s resent after recovery: %+v, %v; want a duplicate batch", id, r, err))
				}
			}
			// The subagent's sidecar is the last acknowledged metadata (or
			// a later one that reached the disk) once compacted.
			if _, err := m.FlushAll(w.ctx); err != nil {
				probs = append(probs, fmt.Sprintf("store check: flush: %v", err))
			}
			metaPath := strings.TrimSuffix(crashLayout.TranscriptPath(kStoreSub), ".jsonl") + ".meta.json"
			meta, _ := vc.ReadFile(metaPath)
			wantMeta := ""
			for _, id := range []string{"sub-0", "sub-1"} {
				if b := w.storeBatches[id]; b != nil && b.acked {
					wantMeta = map[string]string{"sub-0": `{"agentType":"general-purpose","finished":false}`, "sub-1": `{"agentType":"general-purpose","finished":true}`}[id]
				}
			}
			if wantMeta != "" && string(meta) != wantMeta && !(wantMeta != `{"agentType":"general-purpose","finished":true}` && string(meta) == `{"agentType":"general-purpose","finished":true}`) {
				probs = append(probs, fmt.Sprintf("subagent .meta.json is %q, want %q", meta, wantMeta))
			}
			sums, err := catalogOf(m).ListSummaries(w.ctx, kStore.ProjectKey, kStore.SessionID, "")
			switch {
			case err != nil:
				probs = append(probs, fmt.Sprintf("store check: ListSummaries: %v", err))
			case len(sums) == 0:
				if lastAcked > 0 {
					probs = append(probs, fmt.Sprintf("summary lost: none after recovery, version %d was acknowledged", lastAcked))
				}
			case sums[0].Version < lastAcked:
				probs = append(probs, fmt.Sprintf("summary went back: version %d after recovery, %d was acknowledged", sums[0].Version, lastAcked))
			case string(sums[0].Data) != w.storeSummaries[sums[0].Version]:
				probs = append(probs, fmt.Sprintf("summary version %d holds %s, %s was sent for it", sums[0].Version, sums[0].Data, w.storeSummaries[sums[0].Version]))
			}
			return probs
		},
	}
}

// wlGroupCommit: four callers append concurrently to one session (entries
// with and without uuid, a retried batch, an entry two callers both send)
// while another appends to the bystander; the size rule compacts as the
// journal outgrows the file; then a flush.
func wlGroupCommit() *workload {
	return &workload{
		name:           "group-commit",
		cfg:            func(c *Config) { c.MinCompactBytes = 1 },
		appendsCompact: true,
		probe:          []layout.Key{kGroup, kBy},
		run: func(w *world) {
			w.append(0, kBy, line(kBy, w.id(), "by0"), line(kBy, "", "by0-no-uuid"))
			// Every line is made before the goroutines start, so the
			// uuids are the same in every run.
			shared := line(kGroup, w.id(), "shared")
			plan := map[int][][]string{}
			for g := 1; g <= 4; g++ {
				first := []string{line(kGroup, w.id(), fmt.Sprintf("g%d-0a", g)), line(kGroup, w.id(), fmt.Sprintf("g%d-0b", g))}
				second := []string{line(kGroup, "", fmt.Sprintf("g%d-1", g))}
				if g <= 2 {
					second = append(second, shared)
				}
				third := first // a retry: every entry a duplicate
				if g%2 == 1 {
					third = []string{line(kGroup, w.id(), fmt.Sprintf("g%d-2", g)), line(kGroup, "", fmt.Sprintf("g%d-2n", g))}
				}
				plan[g] = [][]string{first, second, third, {line(kGroup, w.id(), fmt.Sprintf("g%d-3", g))}}
			}
			by := [][]string{{line(kBy, w.id(), "by1")}, {line(kBy, "", "by2")}}
			var wg sync.WaitGroup
			for g := 1; g <= 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for _, b := range plan[g] {
						w.append(g, kGroup, b...)
					}
				}(g)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, b := range by {
					w.append(5, kBy, b...)
				}
			}()
			wg.Wait()
			w.flush(kGroup)
		},
	}
}

// wlCompaction: appends, a flush, another program appending a line to the
// canonical file, more appends (one repeating the foreign line and an
// earlier entry), a second flush, and an entry left in the journal.
func wlCompaction() *workload {
	return &workload{
		name:  "compaction",
		probe: []layout.Key{kCompact, kBy},
		run: func(w *world) {
			e1 := line(kCompact, w.id(), "c1")
			w.append(0, kCompact, e1, line(kCompact, "", "c2"))
			w.flush(kCompact)
			f1 := line(kCompact, w.id(), "written by another program")
			w.foreign(kCompact, f1)
			w.append(0, kCompact, line(kCompact, w.id(), "c3"), line(kCompact, "", "c4"))
			w.append(0, kCompact, e1, f1, line(kCompact, w.id(), "c5"))
			w.append(1, kBy, line(kBy, w.id(), "by1"))
			w.flush(kCompact)
			w.append(0, kCompact, line(kCompact, w.id(), "c6"))
			w.flush(kBy)
		},
	}
}

// wlFork: a source with flushed and journaled entries is forked; the fork
// gets an entry, the source another.
func wlFork() *workload {
	forkLine := func(l string) bool {
		return strings.Contains(l, `"forkedFrom":{"sessionId":"`+kSrc.SessionID+`"`)
	}
	titleLine := func(l string) bool {
		return strings.HasPrefix(l, `{"type":"custom-title"`) && strings.Contains(l, kFork.SessionID)
	}
	return &workload{
		name:  "fork",
		probe: []layout.Key{kSrc, kFork, kBy},
		run: func(w *world) {
			w.append(0, kSrc, line(kSrc, w.id(), "s1"), line(kSrc, w.id(), "s2"))
			w.append(1, kBy, line(kBy, w.id(), "by1"))
			w.flush(kSrc)
			w.append(0, kSrc, line(kSrc, w.id(), "s3"))
			// The fork copies the entries the source holds now: at least
			// the acknowledged ones, maybe some whose append failed (a
			// failed call may have stored its batch); exactly as many as a
			// read finds, when the read works.
			w.facts["fork min"] = w.ackedLines(kSrc)
			w.facts["fork max"] = w.sentLines(kSrc)
			n := 0
			if w.m.Read(w.ctx, kSrc, ReadOptions{}, func(es []Entry) error { n += len(es); return nil }) == nil {
				w.facts["fork min"], w.facts["fork max"] = n, n
			}
			err := w.do("fork", func() error {
				_, err := w.m.Repairs().Fork(w.ctx, kSrc, "", "", kFork.SessionID)
				return err
			})
			if err == nil {
				w.setFlag("forked")
			}
			w.append(2, kFork, line(kFork, w.id(), "d1"))
			w.append(0, kSrc, line(kSrc, w.id(), "s4"))
			w.flush(kFork)
		},
		allowed: func(w *world, key layout.Key, l string) bool {
			return key == kFork && (forkLine(l) || titleLine(l))
		},
		check: func(w *world, v *fstest.CrashFS) []string {
			data, err := v.ReadFile(crashLayout.TranscriptPath(kFork))
			if err != nil {
				if w.flag("forked") {
					return []string{"Fork returned but the fork is gone"}
				}
				return nil
			}
			if !jsonLines(data) {
				return []string{fmt.Sprintf("the fork holds a line that is not JSON:\n%s", data)}
			}
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			forked, title, firstOther := 0, -1, -1
			for i, l := range lines {
				switch {
				case forkLine(l):
					forked++
					if firstOther >= 0 {
						return []string{"a forked line after the fork's own entries"}
					}
				case titleLine(l):
					title = i
				case firstOther < 0:
					firstOther = i
				}
			}
			switch {
			case forked == 0 && title < 0 && !w.flag("forked"):
				return nil // no fork: the session holds only its own entries
			case forked < w.facts["fork min"] || forked > w.facts["fork max"] || title < 0:
				return []string{fmt.Sprintf("fork incomplete: %d forked entries (want %d..%d), title line %v:\n%s", forked, w.facts["fork min"], w.facts["fork max"], title >= 0, data)}
			}
			return nil
		},
	}
}

// The damaged transcript of wlRepair: a NUL byte, a duplicate uuid, a
// record cut short in the middle and a torn last line without newline.
func damagedTranscript() string {
	u := func(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-9%011d", n) }
	l := func(id, parent, content string) string {
		p := "null"
		if parent != "" {
			p = `"` + parent + `"`
		}
		return fmt.Sprintf(`{"type":"user","uuid":"%s","parentUuid":%s,"sessionId":"%s","message":{"role":"user","content":"%s"}}`, id, p, kRepair.SessionID, content)
	}
	return l(u(1), "", "one") + "\n" +
		l(u(2), u(1), "t\x00wo") + "\n" +
		l(u(1), "", "one") + "\n" +
		`{"type":"user","uuid":"` + u(3) + `","parentUuid":"` + u(2)[:20] + "\n" +
		l(u(4), u(2), "four") + "\n" +
		`{"type":"user","uu`
}

func repaired(in string) string {
	var out bytes.Buffer
	if _, err := damage.Repair(strings.NewReader(in), int64(len(in)), &out, damage.RepairOptions{SessionID: kRepair.SessionID}); err != nil {
		panic(err)
	}
	return out.String()
}

// wlRepair: entries appended to a damaged transcript, then repair, then
// more entries.
func wlRepair() *workload {
	damaged := damagedTranscript()
	r1 := `{"type":"user","uuid":"00000000-0000-4000-8000-777777777771","parentUuid":"00000000-0000-4000-8000-900000000004","sessionId":"` + kRepair.SessionID + `","message":{"role":"user","content":"r1"}}`
	// The two versions repair can produce: with r1 compacted into the file
	// first, or (when r1's append failed) without.
	withR1 := damaged + "\n" + r1 + "\n"
	versions := []string{repaired(withR1), repaired(damaged)}
	if !strings.Contains(versions[0], r1+"\n") {
		panic("repair changed the appended entry; the workload needs another one")
	}
	allowedLines := map[string]bool{}
	for _, v := range append([]string{damaged + "\n"}, versions...) {
		for _, l := range strings.Split(v, "\n") {
			allowedLines[l] = true
		}
	}
	return &workload{
		name:  "repair",
		probe: []layout.Key{kRepair, kBy},
		setup: func(c *fstest.CrashFS) {
			if err := c.WriteFile(crashLayout.TranscriptPath(kRepair), []byte(damaged), 0o600); err != nil {
				panic(err)
			}
		},
		run: func(w *world) {
			w.append(0, kRepair, r1)
			w.append(1, kBy, line(kBy, w.id(), "by1"))
			err := w.do("repair", func() error {
				_, err := w.m.Repairs().Repair(w.ctx, kRepair, false)
				return err
			})
			if err == nil {
				w.setFlag("repaired")
			}
			w.append(0, kRepair, line(kRepair, w.id(), "r2"))
			w.flush(kRepair)
			w.flush(kBy)
		},
		allowed: func(w *world, key layout.Key, l string) bool { return key == kRepair && allowedLines[l] },
		check: func(w *world, v *fstest.CrashFS) []string {
			data, err := v.ReadFile(crashLayout.TranscriptPath(kRepair))
			if err != nil {
				return []string{"the repaired transcript is gone"}
			}
			s := string(data)
			isRepaired := -1
			for i, ver := range versions { // the longer version first: the other is its prefix
				if strings.HasPrefix(s, ver) {
					isRepaired = i
					break
				}
			}
			switch {
			case isRepaired < 0 && w.flag("repaired"):
				return []string{fmt.Sprintf("Repair returned but the file is not the repaired version:\n%q", s)}
			case isRepaired < 0 && !strings.HasPrefix(s, damaged):
				return []string{fmt.Sprintf("the file is neither the original nor the repaired version:\n%q", s)}
			case isRepaired < 0:
				return nil
			}
			// The original must have been kept before it was replaced.
			origs := [][]string{{withR1}, {damaged, damaged + "\n"}}[isRepaired]
			dir := path.Join(crashLayout.StateDir, "repairs", kRepair.ProjectKey, kRepair.SessionID)
			for _, p := range v.Walk(dir) {
				if b, err := v.ReadFile(p); err == nil && slices.Contains(origs, string(b)) {
					return nil
				}
			}
			return []string{fmt.Sprintf("repaired, but no copy of the original under %s: %q", dir, v.Walk(dir))}
		},
	}
}

// wlDeleteRestore: a session with a subagent transcript and an archive
// mark is deleted to the trash and restored; the bystander keeps going.
func wlDeleteRestore() *workload {
	wl := &workload{
		name:  "delete-restore",
		probe: []layout.Key{kBy},
		run: func(w *world) {
			w.append(0, kDel, line(kDel, w.id(), "x1"), line(kDel, "", "x2"))
			w.append(0, kDelSub, line(kDelSub, w.id(), "sub1"))
			if w.do("archive", func() error { return w.m.SetArchived(w.ctx, kDel, true) }) == nil {
				w.setFlag("archived")
			}
			w.append(1, kBy, line(kBy, w.id(), "by1"))
			w.setFlag("delete started")
			if w.do("delete", func() error { _, err := w.m.Trash().Delete(w.ctx, kDel, false); return err }) == nil {
				w.setFlag("deleted")
			}
			w.append(1, kBy, line(kBy, w.id(), "by2"))
			if !w.flag("deleted") {
				return
			}
			w.setFlag("restore started")
			if w.do("restore", func() error { return w.m.Trash().Restore(w.ctx, kDel) }) == nil {
				w.setFlag("restored")
				w.append(0, kDel, line(kDel, w.id(), "x3"))
			}
			w.flush(kBy)
		},
	}
	// A delete or restore that failed is retried until done: a session
	// must never stay half in the trash.
	wl.heal = func(w *world) []string {
		if !w.hasAcked(kDel) && !w.hasAcked(kDelSub) && !w.flag("archived") {
			return nil // nothing was ever stored: nothing to delete or restore
		}
		if w.flag("delete started") && !w.flag("deleted") {
			_, err := w.m.Trash().Delete(w.ctx, kDel, false)
			if errors.Is(err, errdefs.ErrNotFound) && !w.hasAcked(kDel) && !w.hasAcked(kDelSub) {
				return nil // nothing was ever stored: nothing to delete
			}
			if err != nil {
				return []string{fmt.Sprintf("retried delete: %v", err)}
			}
			w.setFlag("deleted")
		}
		if w.flag("deleted") && !w.flag("restored") {
			w.setFlag("restore started")
			if err := w.m.Trash().Restore(w.ctx, kDel); err != nil {
				return []string{fmt.Sprintf("retried restore: %v", err)}
			}
			w.setFlag("restored")
		}
		return nil
	}
	wl.locate = func(w *world, v *fstest.CrashFS, key layout.Key) ([]byte, bool, []string) {
		if key != kDel && key != kDelSub {
			b, err := v.ReadFile(crashLayout.TranscriptPath(key))
			return b, err == nil, nil
		}
		where := sessionPlaces(v)
		if len(where) != 1 {
			return nil, false, nil // reported by check
		}
		b, err := v.ReadFile(where[0].path(key))
		return b, err == nil, nil
	}
	wl.check = func(w *world, v *fstest.CrashFS) []string {
		where := sessionPlaces(v)
		var places []string
		for _, p := range where {
			places = append(places, p.String())
		}
		switch {
		case len(where) == 0:
			if w.hasAcked(kDel) {
				return []string{"the deleted session is neither in place nor in the trash"}
			}
			return nil
		case len(where) > 1:
			return []string{fmt.Sprintf("the session is in several places: %v\n%s", places, v.Dump())}
		}
		p := where[0]
		var probs []string
		// Whole: every part that was acknowledged is there.
		if w.hasAcked(kDel) && !p.main {
			probs = append(probs, fmt.Sprintf("%s lacks the main transcript", p))
		}
		if w.hasAcked(kDelSub) && !p.sub {
			probs = append(probs, fmt.Sprintf("%s lacks the subagent transcript", p))
		}
		if w.flag("archived") && !p.archived {
			probs = append(probs, fmt.Sprintf("%s lacks archived.json", p))
		}
		switch {
		case w.flag("restored") && p.trash != "":
			probs = append(probs, "Restore returned but the session is in the trash: "+p.String())
		case w.flag("deleted") && !w.flag("restore started") && p.trash == "":
			probs = append(probs, "Delete returned but the session is in place")
		}
		return probs
	}
	return wl
}

// place is where the deleted session's files are: in place (trash "") or
// in one trash entry, and which of its parts are there.
type place struct {
	trash               string
	main, sub, archived bool
}

func (p place) String() string {
	where := "in place"
	if p.trash != "" {
		where = "in trash " + path.Base(p.trash)
	}
	return fmt.Sprintf("%s (main %v, subagent %v, archived %v)", where, p.main, p.sub, p.archived)
}

func (p place) path(key layout.Key) string {
	if p.trash == "" {
		return crashLayout.TranscriptPath(key)
	}
	if key.Subpath == "" {
		return path.Join(p.trash, key.SessionID+".jsonl")
	}
	return path.Join(p.trash, key.SessionID, key.Subpath+".jsonl")
}

// sessionPlaces finds every place holding a part of kDel's session.
func sessionPlaces(v *fstest.CrashFS) []place {
	exists := func(p string) bool { _, err := v.Stat(p); return err == nil }
	inspect := func(p place) (place, bool) {
		p.main = exists(p.path(kDel))
		p.sub = exists(p.path(kDelSub))
		dir := path.Join(p.trash, kDel.SessionID)
		if p.trash == "" {
			dir = crashLayout.SessionDir(kDel)
		}
		p.archived = exists(path.Join(dir, "archived.json"))
		// An empty trash entry (a delete that crashed before moving
		// anything) holds nothing to lose or restore.
		return p, p.main || p.sub || p.archived
	}
	var out []place
	if p, ok := inspect(place{}); ok {
		out = append(out, p)
	}
	root := path.Join(crashLayout.StateDir, "trash", kDel.ProjectKey)
	var entries []string
	for _, p := range v.Walk(root) {
		if rest, ok := strings.CutPrefix(p, root+"/"); ok && strings.Count(rest, "/") == 1 && strings.HasSuffix(rest, "/") {
			entries = append(entries, strings.TrimSuffix(p, "/"))
		}
	}
	sort.Strings(entries)
	for _, e := range entries {
		if p, ok := inspect(place{trash: e}); ok {
			out = append(out, p)
		}
	}
	return out
}

// sentLines counts the lines sent to key.
func (w *world) sentLines(key layout.Key) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, b := range w.batches {
		if b.key == key {
			n += len(b.lines)
		}
	}
	return n
}

// ackedLines counts the acknowledged lines sent to key.
func (w *world) ackedLines(key layout.Key) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, b := range w.batches {
		if b.key == key && b.acked {
			n += len(b.lines)
		}
	}
	return n
}

func (w *world) hasAcked(key layout.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.batches {
		if b.key == key && b.acked {
			return true
		}
	}
	return false
}
