package session

import (
	"fmt"
	"os"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

func (st *State) Snapshot() (*reader.Snapshot, error) {
	sn := &reader.Snapshot{
		CanonSize: st.canon.size, CanonEntries: st.canonEntries, CanonEndsNL: st.canonEndsNL,
		Lineage: st.lineage, Changed: st.changed, Exists: st.Exists(),
	}
	if st.canonExists {
		f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
		}
		sn.Canon = f
	}
	if len(st.pending) > 0 {
		p := &pendingLog{r: st.j.Reader(), spans: make([]stream.Span, len(st.pending))}
		for i, e := range st.pending {
			p.spans[i] = e.span
			if e.foreign {
				if p.foreign == nil {
					p.foreign = make([]bool, len(st.pending))
				}
				p.foreign[i] = true
			}
		}
		sn.Pending = p
	}
	return sn, nil
}

// pendingLog is a snapshot's pending entries (reader.Pending), read from
// the journal.
type pendingLog struct {
	r       *stream.Reader
	spans   []stream.Span
	foreign []bool // for each entry, when any is foreign
}

func (p *pendingLog) Len() int { return len(p.spans) }

func (p *pendingLog) Entry(i int) ([]byte, error) { return p.r.Entry(p.spans[i]) }

func (p *pendingLog) Size(i int) int { return p.spans[i].N }

func (p *pendingLog) Foreign(i int) bool { return p.foreign != nil && p.foreign[i] }

func (p *pendingLog) Close() error { return p.r.Close() }
