package session

import (
	"bytes"
	"fmt"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/writer/files"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

// Other programs writing the canonical file. An agent may append lines to
// the transcript itself (open, write, close) while sessiond appends and
// compacts: its lines are kept, in their order. A compaction renames a
// new file over the old one; an agent that opened the old file just
// before writes into it, a file no name leads to any more. So the
// compaction takes a write lease on the old file before the rename
// (fsys.Leaser): granted, it says no other open file refers to it, and
// an open while it is held waits until the compaction gives it up after
// the rename. A lease still whole then says nobody opened the old file
// since: nothing can be written to it any more, and the compaction
// reads what is there past what it copied and closes it right after the
// rename, holding no descriptor (nor the old file's disk space) past
// that; what it read is rescued once the compaction is done. Otherwise (the
// lease refused because an agent has the file open, broken by an agent
// that opened it meanwhile, or leases unsupported) the compaction keeps
// the old file open (held) and rescues what lands in it: at once after
// the rename, then again when it lets it go, heldGrace later or at the
// next compaction (an agent that holds a transcript open longer than that
// loses what it writes there; agents open, write and close). At most
// maxHeld files are held at once, all sessions together: past that a
// compaction rescues and lets go at once. Rescued lines are logged like
// entries, marked foreign (not acknowledged to anyone, so not in the
// ledger), and the next compaction writes them where the old file ended:
// before the lines the agent appended to the new file after them, which
// it wrote later. (Appended after those, as they once were, an agent's
// lines came out of order: e2e's TestForeignAppendRace under load.) A
// rescued line whose uuid the session holds is dropped. After a crash the
// rescued lines are replayed from the journal after the file's lines.

// maxHeld bounds the replaced files held open at once, all sessions
// together: a thousand live sessions whose agents keep their transcripts
// open must not hold a thousand descriptors and old files.
const maxHeld = 16

// canonStatChanged reports whether the canonical file's size differs from
// what this writer last saw (a cheap check before the tail checksum).
func (st *State) canonStatChanged() bool {
	fi, err := st.fs.Lstat(st.canonPath)
	if err != nil {
		return st.canonExists
	}
	return fi.Size() != st.canon.size
}

// absorbForeign rescans a canonical file another program changed and drops
// journaled entries whose uuid it now holds. Lines already served may have
// moved, so the lineage changes.
func (st *State) absorbForeign() error {
	st.log.Warn("the transcript was changed by another program; keeping its lines and appending sessiond's entries after them")
	pending := st.pending
	if err := st.scanCanonical(); err != nil {
		// The scan starts the session's uuids and fingerprint afresh: cut
		// short, it left them partial, and a writer that went on from
		// there would take entries it holds for new ones. It reopens from
		// disk instead.
		st.failed = err
		return err
	}
	st.pending = nil
	st.pendingBytes = 0
	spans := make([]stream.Span, len(pending))
	foreign := make([]bool, len(pending))
	for i, p := range pending {
		spans[i], foreign[i] = p.span, p.foreign
	}
	if len(spans) > 0 {
		if _, err := st.replay(spans, foreign); err != nil {
			st.failed = err
			return err
		}
	}
	st.lineage = st.lineages.Add(1)
	st.Publish()
	st.noteChange()
	return nil
}

// leaseReplaced takes a write lease on src, the canonical file a
// compaction is about to replace, and reports whether it has one.
func (st *State) leaseReplaced(src fsys.File) bool {
	leased, unsupported := files.Lease(src)
	if unsupported != nil && st.leaseNoted.CompareAndSwap(false, true) {
		st.log.Debug("the filesystem or the process takes no file leases: each compaction holds the file it replaced a while", zap.Error(unsupported))
	}
	// Refused because another program (or a reader of sessiond's) has
	// the file open: it is held after the rename.
	return leased
}

// renameOver renames the temp file at tmpPath over the canonical file,
// src, under a lease on src when one is granted (files.RenameOver).
func (st *State) renameOver(tmpPath string, src fsys.File) (files.Replacement, error) {
	return files.RenameOver(st.fs, tmpPath, st.canonPath, src, st.canon.size, st.canon.tail, st.leaseReplaced(src))
}

// replaced deals with f, the file a compaction just replaced, whose
// content was old, once the compaction is done: what renameOver read of
// it when it closed it (f nil then) is rescued; a file nobody opened but
// renameOver could not read or found rewritten is looked at again and
// closed; any other is held, as long as fewer than maxHeld files are.
func (st *State) replaced(f fsys.File, old fingerprint, rep files.Replacement) error {
	if rep.Closed {
		if len(rep.Tail) == 0 || st.failed != nil {
			return nil
		}
		return st.rescue(rep.Tail)
	}
	// The old file must still be what was copied: a program that
	// rewrote it meanwhile (open("w") just before the rename) wrote a
	// version that no name leads to. Rescuing a slice of it as lines would
	// splice garbage in; a copy is kept instead, for a person to merge.
	rewritten, err := st.held.Hold(f, old.size, old.tail)
	if rewritten != nil {
		st.keepRewritten(rewritten)
		return nil
	}
	if err != nil {
		// The compaction is done either way: what cannot be read now is
		// not its failure.
		switch {
		case rep.Alone:
			// The lease says nobody opened it: nothing was appended.
			st.held.Drop()
		case st.held.TakeSlot():
			// Held: whether another program appended to it or rewrote
			// it is told once it reads again (rescueLate).
			st.log.Warn("cannot read the transcript a compaction replaced, to rescue lines another program appended to it; it is held and read again later", zap.Error(err))
		default:
			st.held.Drop()
			st.log.Error("cannot read the transcript a compaction replaced, to rescue lines another program may have appended to it during the compaction, and as many replaced transcripts as allowed are held already: it is let go unread", zap.Error(err))
		}
		return nil
	}
	if !rep.Alone {
		if st.held.TakeSlot() {
			return st.rescueHeld(false)
		}
		st.log.Debug("as many replaced transcripts as allowed are held open already: this one's late lines are rescued now and it is let go")
	}
	err = st.rescueHeld(true)
	st.held.Drop()
	return err
}

// keepRewritten keeps a copy of f, a replaced canonical file another
// program rewrote (not just appended to), and closes it.
func (st *State) keepRewritten(f fsys.File) {
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		st.log.Error("another program rewrote the transcript while sessiond replaced it; its version no longer has a name, is not merged, and could not be copied",
			zap.Error(errdefs.FromIO(err)))
		return
	}
	where, err := st.keepCopy("foreign", f, fi.Size())
	st.log.Error("another program rewrote the transcript while sessiond replaced it; its version no longer has a name and is not merged",
		zap.String("kept_at", where), zap.Error(err))
}

// rescueLate rescues what was appended to the held file since, logging a
// failure (the writer goes on: the lines are in that file, not lost by
// sessiond's doing).
func (st *State) rescueLate(final bool) {
	if err := st.rescueHeld(final); err != nil {
		st.log.Warn("cannot rescue lines another program appended to the transcript during a compaction", zap.Error(err))
	}
}

// rescueHeld logs, as rescued lines, what was appended to the held file
// since it was last looked at: whole lines only, unless final (the file
// is let go next, and a line cut short is kept as it is). A file
// rewritten after it was held is kept aside, as replaced does.
func (st *State) rescueHeld(final bool) error {
	if st.held.File() == nil || st.failed != nil {
		return nil
	}
	data, rewritten, err := st.held.Late(final)
	if rewritten != nil {
		st.keepRewritten(rewritten)
		return nil
	}
	if err != nil {
		return fmt.Errorf("compact %s: read lines appended during the rename: %w", st.key, errdefs.FromIO(err))
	}
	if len(data) == 0 {
		return nil
	}
	if err := st.rescue(data); err != nil {
		return err
	}
	st.held.Advance(len(data))
	return nil
}

// rescue logs lines another program appended to the old canonical file
// while compaction renamed the new one into place; they go into the file
// at the next compaction. Lines whose uuid the session holds are dropped.
func (st *State) rescue(data []byte) error {
	st.log.Warn("another program appended to the transcript during a compaction; its lines are kept", zap.Int("bytes", len(data)))
	var lines [][]byte
	var ids []string
	for _, l := range bytes.SplitAfter(data, []byte{'\n'}) {
		l = bytes.TrimSuffix(l, []byte{'\n'})
		if len(l) == 0 {
			continue
		}
		id, ok := rawjson.TopLevelString(l, "uuid")
		if ok && id != "" {
			if st.ids.has(id) {
				continue
			}
			st.ids.add(id)
		}
		lines = append(lines, l)
		ids = append(ids, id)
	}
	if len(lines) == 0 {
		return nil
	}
	st.noteForeign(lines)
	meta := sessionstore.BatchMeta{Foreign: true, At: st.Config.Clock.Now().UnixMilli()}
	err := st.logBatches([][][]byte{lines}, [][]byte{meta.Encode()}, func(i int, sp stream.Span) {
		st.addPending(pendingEntry{span: sp, size: len(lines[i]), uuid: ids[i], foreign: true})
		if st.ent != nil {
			st.ent.Add(lines[i], true)
		}
	})
	if err == nil {
		st.notifyChange()
	}
	return err
}
