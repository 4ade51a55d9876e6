package reader

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Source is what a Reader needs of the writers (package writer's
// Snapshots): whether a session exists, a consistent snapshot of it taken
// by its writer, and a hold that keeps its writer from retiring while it
// is followed.
type Source interface {
	// Exists reports whether key's transcript is here (on disk or in the
	// journal); an error says it could not look.
	Exists(key layout.Key) (bool, error)
	// NotFound is the error for a transcript that does not exist.
	NotFound(key layout.Key) error
	// Snapshot takes key's snapshot (see Mode). The caller closes it.
	Snapshot(ctx context.Context, key layout.Key, mode Mode) (*Snapshot, error)
	// Hold keeps key's writer open until Release, opening it if needed.
	Hold(key layout.Key) (Hold, error)
}

// Mode says how a snapshot may be taken.
type Mode int

const (
	// Live takes it on the session's writer, opening one if none is, and
	// leaves the writer open.
	Live Mode = iota
	// Passing reads a session that has no writer and nothing in the
	// journal straight from its file (Snapshot.Direct), so that reading
	// thousands of old sessions starts no writers; a writer opened for
	// it (a journal left behind) retires right after.
	Passing
)

// Hold is a writer kept open for a follower.
type Hold interface {
	// Live reports whether the held writer is still the one serving its
	// key: one that failed and was replaced must be held anew.
	Live() bool
	Release()
}

// Snapshot is a consistent view of a session, taken on its writer
// goroutine. It holds its own file handles: compaction replaces files by
// rename, so the handles keep seeing the content of the moment, and the
// writer never waits for a slow reader.
type Snapshot struct {
	// Canon is the canonical file, nil when there is none.
	Canon fsys.File
	// Direct: no writer held the session; Canon is its file as it is, to
	// be read to its end, and only Exists is set below: no writer
	// counted its lines, and no lineage vouches for them.
	Direct       bool
	CanonSize    int64
	CanonEntries uint64
	CanonEndsNL  bool // false when the file ends in a torn line
	// Pending are the entries acknowledged since, nil when none.
	Pending Pending
	// Lineage changes whenever lines already served may have moved.
	Lineage uint64
	// Changed closes when the session holds more than this snapshot.
	Changed <-chan struct{}
	// Exists is false for a session that has no content (yet).
	Exists bool
}

// Pending are a snapshot's entries acknowledged into the journal and not
// compacted yet, in order. The journal keeps what they need until Close.
type Pending interface {
	Len() int
	// Entry reads entry i, without its newline; it is valid until the
	// next call.
	Entry(i int) ([]byte, error)
	// Size is entry i's length in bytes, known without reading it.
	Size(i int) int
	// Foreign reports whether entry i is a line another program
	// appended, which the journal rescued: not one Append validated.
	Foreign(i int) bool
	Close() error
}

// Close releases the snapshot's files.
func (sn *Snapshot) Close() {
	if sn.Canon != nil {
		sn.Canon.Close()
	}
	if sn.Pending != nil {
		sn.Pending.Close()
	}
}

func (sn *Snapshot) pending() int {
	if sn.Pending == nil {
		return 0
	}
	return sn.Pending.Len()
}

// Reader streams the snapshot's content as one JSONL file: the canonical
// file, then the pending entries as they will be once compacted.
func (sn *Snapshot) Reader() io.Reader {
	if sn.Direct {
		return sn.Canon
	}
	var parts []io.Reader
	if sn.Canon != nil {
		parts = append(parts, io.NewSectionReader(sn.Canon, 0, sn.CanonSize))
		if !sn.CanonEndsNL && sn.pending() > 0 {
			parts = append(parts, strings.NewReader("\n"))
		}
	}
	if sn.pending() > 0 {
		parts = append(parts, &pendingReader{p: sn.Pending})
	}
	return io.MultiReader(parts...)
}

type pendingReader struct {
	p   Pending
	i   int
	buf []byte
	cur []byte
}

func readPending(p Pending, i int) ([]byte, error) {
	line, err := p.Entry(i)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", errdefs.FromIO(err))
	}
	return line, nil
}

func (p *pendingReader) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.i >= p.p.Len() {
			return 0, io.EOF
		}
		line, err := readPending(p.p, p.i)
		if err != nil {
			return 0, err
		}
		p.buf = append(append(p.buf[:0], line...), '\n')
		p.cur = p.buf
		p.i++
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}
