// Package progress keeps the long operations sessiond is running, with how
// far each has got, so that Status can show them: the listing index built
// at start, the journal replay after a crash, a check of many transcripts,
// a repair. A client that starts an operation names it (an id in the call's
// metadata) and follows its progress through Status; sessionctl draws a
// bar from it.
package progress

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/metadata"
)

// MetadataKey is the gRPC metadata key a client names its operation with.
const MetadataKey = "sessiond-operation"

// Registry holds the operations in progress. The zero value is not
// usable; a nil *Registry accepts every call and keeps nothing.
type Registry struct {
	mu  sync.Mutex
	ops map[string]*Op
}

// New returns an empty registry.
func New() *Registry { return &Registry{ops: map[string]*Op{}} }

// Op is one operation in progress.
type Op struct {
	r           *Registry
	id          string
	kind, unit  string
	started     time.Time
	done, total atomic.Int64
}

// Snapshot is an operation as Status shows it.
type Snapshot struct {
	ID, Kind, Unit string
	Done, Total    int64 // Total 0: not known yet
	Started        time.Time
}

// Start registers an operation of kind (counted in unit) and returns it;
// End must be called. Its id is the one ctx carries from the client, else
// a new one.
func (r *Registry) Start(ctx context.Context, kind, unit string, total int64) *Op {
	if r == nil {
		return nil
	}
	op := &Op{r: r, id: IDFrom(ctx), kind: kind, unit: unit, started: time.Now()}
	if op.id == "" {
		op.id = uuid.NewString()
	}
	op.total.Store(total)
	r.mu.Lock()
	r.ops[op.id] = op
	r.mu.Unlock()
	return op
}

// Add counts n more units done.
func (o *Op) Add(n int64) {
	if o != nil {
		o.done.Add(n)
	}
}

// SetTotal sets how many units the operation has in all.
func (o *Op) SetTotal(n int64) {
	if o != nil {
		o.total.Store(n)
	}
}

// End removes the operation from the registry.
func (o *Op) End() {
	if o == nil {
		return
	}
	o.r.mu.Lock()
	if o.r.ops[o.id] == o {
		delete(o.r.ops, o.id)
	}
	o.r.mu.Unlock()
}

// List returns the operations in progress, oldest first.
func (r *Registry) List() []Snapshot {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	out := make([]Snapshot, 0, len(r.ops))
	for _, o := range r.ops {
		out = append(out, Snapshot{ID: o.id, Kind: o.kind, Unit: o.unit, Done: o.done.Load(), Total: o.total.Load(), Started: o.started})
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// IDFrom returns the operation id a client put in the call's metadata.
func IDFrom(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	if v := md.Get(MetadataKey); len(v) > 0 && len(v[0]) <= 64 {
		return v[0]
	}
	return ""
}
