package progress

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestRegistry(t *testing.T) {
	r := New()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "op-1"))
	a := r.Start(ctx, "check", "transcripts", 10)
	b := r.Start(context.Background(), "index", "sessions", 0)
	a.Add(3)
	b.SetTotal(100)
	b.Add(1)
	got := r.List()
	if len(got) != 2 || got[0].ID != "op-1" || got[0].Done != 3 || got[0].Total != 10 || got[1].Kind != "index" || got[1].Total != 100 || got[1].ID == "" {
		t.Fatalf("List = %+v", got)
	}
	a.End()
	if got := r.List(); len(got) != 1 || got[0].Kind != "index" {
		t.Fatalf("after End: %+v", got)
	}
	var nilReg *Registry
	op := nilReg.Start(ctx, "x", "y", 1) // a nil registry keeps nothing and never fails
	op.Add(1)
	op.End()
	if nilReg.List() != nil {
		t.Fatal("nil registry listed something")
	}
}
