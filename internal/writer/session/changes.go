package session

import "github.com/sessiond/sessiond/internal/layout"

// Change tells Config.Changed that a transcript changed: entries were
// acknowledged, lines moved (a repair, lines another program wrote), the
// session left for the trash or came back from it, or one of its
// sidecars was written. It says what changed, not how: a watcher reads
// the transcript again (reader.Reader.ReadLines).
type Change struct {
	Key layout.Key
	// Entries and Bytes are what the transcript holds now, acknowledged
	// entries not compacted yet included (Bytes as the file will be once
	// they are); 0 with Gone or Family.
	Entries uint64
	Bytes   int64
	// Added is how many entries were acknowledged since the last Change
	// of this writer (a watcher that does not know yet how far it is
	// behind counts them).
	Added uint64
	// Lineage is the writer's lineage, as reader.Reader.ReadLines serves it: when it
	// differs from the one a watcher last read under, lines it read may
	// have moved (a repair, another program's rewrite, a writer opening
	// the file), even though the number of entries may be the same. 0
	// with Gone, Family or Sidecars.
	Lineage uint64
	// Gone: the transcript went to the trash (or was purged); for a main
	// key, with every subagent transcript of its session.
	Gone bool
	// Family: a restore brought back or merged the session's transcripts
	// (for a main key, its subagents' too).
	Family bool
	// Sidecars: one of the session's sidecars (sidecar.Names: the
	// archive mark, the title file) was written; Key is the main key.
	Sidecars bool
}

// tell tells Config.Changed about c. It must not block: the writer
// goroutines and deletes call it.
func (d *Env) Tell(c Change) {
	if d.Config.Changed != nil {
		d.Config.Changed(c)
	}
}

// noteChange tells Config.Changed what st holds now.
func (st *State) noteChange() {
	if st.Config.Changed == nil {
		return
	}
	bytes := st.canon.size + st.pendingBytes
	if !st.canonEndsNL && st.canonExists && len(st.pending) > 0 {
		bytes++
	}
	st.Tell(Change{Key: st.key, Entries: st.totalEntries(), Bytes: bytes, Added: st.unnoted, Lineage: st.lineage})
	st.unnoted = 0
}
