package session

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

// The writer's side of the ledger of acknowledged entries (package
// ledger): what a session holds, as the ledger compares it, and what
// repair puts back.

func (fp fingerprint) ledger() ledger.Fingerprint {
	return ledger.Fingerprint{Size: fp.size, Tail: fp.tail}
}

// holdings is what the session's writer holds now (ledger.Holdings): the
// canonical file and the pending entries.
type holdings struct{ st *State }

func (h holdings) Exists() bool { return h.st.canonExists }

func (h holdings) HasPrefix(fp ledger.Fingerprint) (bool, error) {
	return h.st.hasPrefix(fingerprint{size: fp.Size, tail: fp.Tail})
}

func (h holdings) HasUUID(id string) bool { return h.st.ids.has(id) }

func (h holdings) Open() (fsys.File, error) {
	return h.st.fs.OpenFile(h.st.canonPath, os.O_RDONLY, 0)
}

func (h holdings) Pending(fn func(line []byte)) error {
	st := h.st
	if len(st.pending) == 0 {
		return nil
	}
	spans := make([]stream.Span, len(st.pending))
	for i, p := range st.pending {
		spans[i] = p.span
	}
	return st.j.Read(spans, func(_ int, line []byte) error {
		fn(line)
		return nil
	})
}

// PlanPutback finds where each acknowledged entry missing from the
// session's file goes back (nil when none is missing).
func (st *State) PlanPutback() (*ledger.Plan, error) {
	return st.acked.PlanPutback(holdings{st}, st.Journal)
}

// RecordPutback records what stays missing once repair carried out plan
// (nil: none was made) and, when replaced says the file was replaced,
// names the repaired file in the ledger's last record, so the next open
// need not compare the file with it again.
func (st *State) RecordPutback(plan *ledger.Plan, replaced bool) {
	if plan == nil {
		return
	}
	rest := plan.Remaining()
	if !replaced {
		st.acked.SetMissing(rest, "repair")
		return
	}
	st.acked.SetMissing(rest, "repair")
	if err := st.acked.Append(st.canon.ledger(), len(rest), nil); err != nil {
		st.log.Warn("cannot record the repaired transcript in its ledger", zap.Error(err))
	}
}

// PutbackTemp carries out the plan into a temp file next to the canonical
// file, returned open; the caller reads it and removes it. It is not
// synced: nothing reads it after a crash, and the writer's next open
// removes it with the other temp files a crash left (removeStaleTemps).
func (st *State) PutbackTemp(p *ledger.Plan, src fsys.File, size int64) (fsys.File, string, int64, error) {
	path := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	f, err := st.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", 0, fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	err = p.Write(f, src, size)
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if err != nil {
		f.Close()
		st.fs.Remove(path)
		return nil, "", 0, fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	return f, path, fi.Size(), nil
}
