// Package ledger keeps, per transcript, the entries sessiond acknowledged
// and compacted into it, and reports what another program's rewrite of the
// transcript dropped of them. Once a compaction has moved a session's
// entries into its canonical file, the journal lets them go, and another
// program may rewrite the file without them (a tool that loaded the
// transcript earlier and saves its copy back with open("w")). To tell that
// apart from lines it never wrote, sessiond records every entry it
// acknowledged and compacted into a transcript: its ledger,
// <state>/acked/<project>/<sid>.acked (layout.AckedPath).
//
// Each compaction appends one record, synced, before its compaction marker
// goes to the journal: so at any crash every acknowledged entry is in the
// ledger or still in the journal's current stream of the transcript (the
// writer counts both). A crash between the two makes the next compaction
// record the same entries again; they are known by where they were logged
// (Pos: segment seqs never repeat), so each counts once.
//
// An entry is recorded by its uuid or, without one, by a digest of its JSON
// in a canonical form (keys sorted, no insignificant space, escapes
// resolved): a tool that loads and saves the transcript again with its own
// JSON encoder keeps such lines, and they must not count as lost. Lines
// another program appended (rescued during a compaction) are not recorded:
// sessiond never acknowledged them to anyone.
//
// The ledger is what makes the report correct after a restart and after the
// journal's retention expired: it knows the uuids even when the journal no
// longer holds the bytes.
//
// Its records also carry, for a transcript the agent's CLI writes too, the
// lines without uuid the writer took in from it and those a mirrored copy
// matched (SharedOp), in order: the writer replays them as it opens, so a
// mirrored copy arriving after a restart or a crash is still matched, once.
// A record whose append failed is cut before the ledger is read or written
// again (Book.read): a failed sync can leave it readable and not durable. The files, by job: record.go, the record format
// and reading a ledger back; book.go, a transcript's ledger as its writer
// appends to it; match.go, matching a ledger with a transcript's lines;
// missing.go, what is found missing (log, Status, notes under
// <state>/missing); putback.go, repair's plan to put entries back from the
// journal's retained segments.
//
// The package reaches the writers and the journal only through the
// interfaces it defines (Holdings, Journal); its files go through fsys.FS.
package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Record (one frame of internal/frame, type 1, seeded with the key):
// canonical size int64, tail uint32, entries known missing then uint32,
// count uint32, then each entry: segment uvarint, offset uvarint, kind
// byte, and a 16-byte uuid (kind 1), a uvarint-prefixed uuid string that
// is not in canonical form (kind 2) or an 8-byte content digest (kind 3).
// Then, only in a record that has some (so that a release before them
// reads every other record), the shared file's operations: count uvarint,
// then each a kind byte (sharedNote, sharedTake) and a 16-byte digest.
const (
	ackRecord    frame.Type = 1
	ackUUID                 = 1
	ackString               = 2
	ackContent              = 3
	ackHeadBytes            = 8 + 4 + 4 + 4
	sharedNote              = 1
	sharedTake              = 2
	// maxAckRecord bounds one record: a compaction of a million entries
	// is about 30 MB of it.
	maxAckRecord = 256 << 20
)

var ackRules = frame.Rules{MaxType: ackRecord, MaxRecord: maxAckRecord}

// Pos is where an entry was logged in the journal: its segment's seq and
// the offset of its frame there.
type Pos struct {
	Seg uint64
	Off int64
}

// Fingerprint names a canonical file's content cheaply: its size and a
// checksum of its last bytes (the writer's).
type Fingerprint struct {
	Size int64
	Tail uint32
}

// ID is one acknowledged entry.
type ID struct {
	pos  Pos
	uuid string // "" for an entry without uuid
	hash uint64 // its content digest when it has no uuid
}

// IDOf is the identity of an entry logged at pos whose uuid is known (""
// for none: then line's content names it).
func IDOf(pos Pos, uuid string, line []byte) ID {
	if uuid != "" {
		return ID{pos: pos, uuid: uuid}
	}
	return ID{pos: pos, hash: contentID(line)}
}

// Pos is where the entry was logged.
func (a ID) Pos() Pos { return a.pos }

// String names the entry for people: its uuid, or its content digest.
func (a ID) String() string {
	if a.uuid != "" {
		return a.uuid
	}
	return fmt.Sprintf("content:%016x", a.hash)
}

// contentID digests a line without uuid in a canonical form (see the
// package comment). A line that is not JSON (never stored by sessiond, but
// read from a file) is digested as it is.
func contentID(line []byte) uint64 {
	var v any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	b := line
	if d.Decode(&v) == nil {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) == nil {
			b = bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
		}
	}
	sum := sha256.Sum256(b)
	return binary.LittleEndian.Uint64(sum[:8])
}

// SharedOp is one change to the lines without uuid that the agent's CLI
// wrote into a transcript it shares with sessiond and that no mirrored
// copy matched yet (package writer/files, Unmatched): a line noted as the
// writer took it in, or one a mirrored copy took. The writer records them
// in the ledger, in order, so that it finds the same lines unmatched after
// a restart or a crash: a note rides in the record that names the file
// holding its line (no record names the file without the notes of the
// lines it took in), a take in a record written once the append it
// answers is durable, before that append is acknowledged.
type SharedOp struct {
	Take   bool
	Digest [16]byte
}

// Ledger is a transcript's ledger as read back.
type Ledger struct {
	IDs []ID // in acknowledged order, each logged entry once
	// Shared are the shared file's operations of every record, in order.
	Shared  []SharedOp
	Last    Fingerprint // the canonical file the last record was written for
	Missing int         // entries the writer knew missing then
	Records int
	End     int64 // where the last whole record ends
	content bool  // some entries have no uuid
	// Damaged says why reading stopped before the end at something that
	// is not a torn last record: a bad record with a whole one written
	// after it, or a whole record that does not decode (a newer
	// release's). nil for a ledger read to its end or to a torn tail.
	Damaged error
}

func seed(k layout.Key) uint64 {
	h := fnv.New64a()
	h.Write([]byte("sessiond-acked\x00" + k.String()))
	return h.Sum64()
}

func encodeRecord(fp Fingerprint, missing int, ids []ID, ops []SharedOp) []byte {
	b := make([]byte, 0, ackHeadBytes+len(ids)*28+len(ops)*17)
	b = binary.LittleEndian.AppendUint64(b, uint64(fp.Size))
	b = binary.LittleEndian.AppendUint32(b, fp.Tail)
	b = binary.LittleEndian.AppendUint32(b, uint32(min(missing, 1<<31)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id.pos.Seg)
		b = binary.AppendUvarint(b, uint64(id.pos.Off))
		switch u, ok := transcript.CanonicalUUID(id.uuid); {
		case id.uuid == "":
			b = append(b, ackContent)
			b = binary.LittleEndian.AppendUint64(b, id.hash)
		case ok:
			b = append(b, ackUUID)
			b = append(b, u[:]...)
		default:
			b = append(b, ackString)
			b = binary.AppendUvarint(b, uint64(len(id.uuid)))
			b = append(b, id.uuid...)
		}
	}
	if len(ops) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		kind := byte(sharedNote)
		if op.Take {
			kind = sharedTake
		}
		b = append(b, kind)
		b = append(b, op.Digest[:]...)
	}
	return b
}

var errRecord = frame.Error("ledger record does not decode")

// recordDecoder reads the entries of one record's payload.
type recordDecoder struct{ p []byte }

func (d *recordDecoder) uvarint() (uint64, bool) {
	v, k := binary.Uvarint(d.p)
	if k <= 0 {
		return 0, false
	}
	d.p = d.p[k:]
	return v, true
}

func (d *recordDecoder) id() (ID, error) {
	seg, ok1 := d.uvarint()
	off, ok2 := d.uvarint()
	if !ok1 || !ok2 || len(d.p) < 1 {
		return ID{}, errRecord
	}
	id := ID{pos: Pos{Seg: seg, Off: int64(off)}}
	kind := d.p[0]
	d.p = d.p[1:]
	switch kind {
	case ackContent:
		if len(d.p) < 8 {
			return ID{}, errRecord
		}
		id.hash = binary.LittleEndian.Uint64(d.p)
		d.p = d.p[8:]
	case ackUUID:
		if len(d.p) < 16 {
			return ID{}, errRecord
		}
		var u [16]byte
		copy(u[:], d.p)
		id.uuid = uuid.UUID(u).String()
		d.p = d.p[16:]
	case ackString:
		l, ok := d.uvarint()
		if !ok || uint64(len(d.p)) < l {
			return ID{}, errRecord
		}
		id.uuid = string(d.p[:l])
		d.p = d.p[l:]
	default:
		return ID{}, errRecord
	}
	return id, nil
}

// sharedOps reads the shared file's operations that end a record.
func (d *recordDecoder) sharedOps(fn func(SharedOp)) error {
	if len(d.p) == 0 {
		return nil
	}
	n, ok := d.uvarint()
	if !ok || n == 0 || uint64(len(d.p)) != n*17 {
		return errRecord
	}
	for ; len(d.p) > 0; d.p = d.p[17:] {
		if d.p[0] != sharedNote && d.p[0] != sharedTake {
			return errRecord
		}
		op := SharedOp{Take: d.p[0] == sharedTake}
		copy(op.Digest[:], d.p[1:17])
		fn(op)
	}
	return nil
}

func decodeRecord(p []byte, fn func(ID), opFn func(SharedOp)) (fp Fingerprint, missing int, err error) {
	if len(p) < ackHeadBytes {
		return fp, 0, errRecord
	}
	fp = Fingerprint{int64(binary.LittleEndian.Uint64(p)), binary.LittleEndian.Uint32(p[8:])}
	missing = int(binary.LittleEndian.Uint32(p[12:]))
	n := int(binary.LittleEndian.Uint32(p[16:]))
	d := recordDecoder{p[ackHeadBytes:]}
	for i := 0; i < n; i++ {
		id, err := d.id()
		if err != nil {
			return fp, 0, err
		}
		fn(id)
	}
	if err := d.sharedOps(opFn); err != nil {
		return fp, 0, err
	}
	return fp, missing, nil
}

// unreadable is the error for state that could not be read: nothing was
// done without it, and a retry may succeed.
func unreadable(what string, err error) error {
	return fmt.Errorf("cannot read %s, and nothing was done without it: %w; retry: %w", what, errdefs.FromIO(err), errdefs.ErrUnavailable)
}

// Read reads key's ledger; nil when it has none. Reading stops at the
// first record that does not validate: a torn last record, never synced,
// whose compaction never reached its marker, or damage (Ledger.Damaged).
func Read(fsy fsys.FS, L layout.Layout, key layout.Key) (*Ledger, error) {
	f, err := fsy.OpenFile(L.AckedPath(key), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	what := "the ledger of " + key.String()
	if err != nil {
		return nil, unreadable(what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, unreadable(what, err)
	}
	led := &Ledger{}
	r := reader{f: f, size: fi.Size(), seed: seed(key), led: led, seen: map[Pos]bool{}}
	if err := r.records(); err != nil {
		return nil, unreadable(what, err)
	}
	return led, nil
}

// reader reads a ledger's records into led.
type reader struct {
	f    fsys.File
	size int64
	seed uint64
	led  *Ledger
	seen map[Pos]bool
}

// records reads up to the first record that does not validate; its error
// is the file's, never the records'.
func (r *reader) records() error {
	w := frame.NewWindow(r.f, r.size, int(min(max(r.size, frame.HeaderSize), 1<<20)))
	for off := int64(0); off < r.size; {
		h, err := frame.Read(w, off, r.seed, ackRules)
		if err != nil {
			if !frame.IsError(err) {
				return err
			}
			later, ferr := frame.FindLaterWrite(w, off, r.seed, ackRules)
			if ferr != nil {
				return ferr
			}
			if later >= 0 {
				r.led.Damaged = fmt.Errorf("the record at offset %d is damaged (%v), and one written after it at %d is whole", off, err, later)
			}
			return nil
		}
		p := make([]byte, h.Length)
		if err := frame.ReadFull(r.f, p, off+frame.HeaderSize); err != nil {
			return err
		}
		var ids []ID
		var ops []SharedOp
		fp, missing, err := decodeRecord(p, func(id ID) { ids = append(ids, id) }, func(op SharedOp) { ops = append(ops, op) })
		if err != nil {
			// Checksummed, so a bug or a newer format: stop trusting here.
			r.led.Damaged = fmt.Errorf("the record at offset %d is whole but does not decode (written by a newer release?)", off)
			return nil
		}
		r.add(ids, fp, missing)
		r.led.Shared = append(r.led.Shared, ops...)
		off += h.Size()
		r.led.End = off
	}
	return nil
}

// add takes one record in, each logged entry once.
func (r *reader) add(ids []ID, fp Fingerprint, missing int) {
	led := r.led
	for _, id := range ids {
		if !r.seen[id.pos] {
			r.seen[id.pos] = true
			led.IDs = append(led.IDs, id)
			led.content = led.content || id.uuid == ""
		}
	}
	led.Last, led.Missing = fp, missing
	led.Records++
}
