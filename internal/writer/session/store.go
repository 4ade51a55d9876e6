package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/sessionstore"
)

// loadStore reads the session's store sidecar for its writer. A damaged one
// is copied aside (keepDamaged) and removed, and the session starts with
// an empty summary and no batch ids: keeping the session from taking
// appends would cost more than a summary the adapter refolds (its version
// mismatch tells it to) and batch ids a client resends only within
// minutes.
func (st *State) loadStore() error {
	s, err := sessionstore.Read(st.fs, st.Config.Layout, st.key)
	var dmg *sessionstore.DamagedError
	if errors.As(err, &dmg) {
		kept, kerr := st.keepDamaged(dmg.Path, bytes.NewReader(dmg.Body))
		if kerr != nil {
			return kerr
		}
		st.log.Error("the session's store sidecar is damaged; its summary and batch ids start empty (a copy is kept)",
			zap.String("path", dmg.Path), zap.String("copy", kept), zap.Error(dmg.Err))
		if err := st.fs.Remove(dmg.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			st.log.Warn("cannot remove the damaged store sidecar; it is copied again at the next open", zap.String("path", dmg.Path), zap.Error(err))
		}
		err = nil
	}
	if err != nil {
		return err
	}
	st.store = s
	return nil
}

// saveStore writes the store sidecar if it changed since it was read or
// last written.
func (st *State) saveStore() error {
	if !st.storeDirty {
		return nil
	}
	if err := sessionstore.Save(st.fs, st.Config.Layout, st.key, &st.store, st.Config.Clock.Now()); err != nil {
		return err
	}
	st.storeDirty = false
	return nil
}

// applyMetas replays the Meta records of recovered batches.
func (st *State) applyMetas(metas [][]byte) {
	for _, b := range metas {
		var m sessionstore.BatchMeta
		if err := json.Unmarshal(b, &m); err != nil {
			// The record passed its checksum, so this is a bug or a
			// future format: keep the entries, skip what it says.
			st.log.Warn("unreadable batch meta record in the journal; skipped", zap.Error(err))
			continue
		}
		if m.Foreign {
			continue // says nothing about the store
		}
		st.store.Apply(m)
		st.storeDirty = true
	}
	st.publishSummary()
}

// publishSummary copies the summaries into the listing entry.
func (st *State) publishSummary() {
	if st.ent != nil {
		st.ent.Stores = st.store.ListingSummaries()
	}
}
