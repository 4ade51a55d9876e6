package writer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/rawjson"
)

// The ledger of acknowledged entries. Once a compaction has moved a
// session's entries into its canonical file, the journal lets them go, and
// another program may rewrite the file without them (a tool that loaded
// the transcript earlier and saves its copy back with open("w")). To tell
// that apart from lines it never wrote, sessiond records, per transcript,
// every entry it acknowledged and compacted there: its ledger,
// <state>/acked/<project>/<sid>.acked (layout.AckedPath).
//
// Each compaction appends one record, synced, before its compaction
// marker goes to the journal: so at any crash every acknowledged entry is in
// the ledger or still in the journal's current stream of the transcript (the
// writer counts both). A crash between the two makes the next compaction
// record the same entries again; they are known by where they were
// logged (a span: segment seqs never repeat), so each counts once.
//
// An entry is recorded by its uuid or, without one, by a digest of its
// JSON in a canonical form (keys sorted, no insignificant space, escapes
// resolved): a tool that loads and saves the transcript again with its
// own JSON encoder keeps such lines, and they must not count as lost.
// Lines another program appended (rescued during a compaction) are not
// recorded: sessiond never acknowledged them to anyone.
//
// The ledger is what makes the report correct after a restart and after
// retention expired: it knows the uuids even when the journal no longer holds
// the bytes (see putback.go for putting them back).
//
// Record (one frame of internal/frame, type 1, seeded with the key):
// canonical size int64, tail uint32, entries known missing then uint32,
// count uint32, then each entry: segment uvarint, offset uvarint, kind
// byte, and a 16-byte uuid (kind 1), a uvarint-prefixed uuid string that
// is not in canonical form (kind 2) or an 8-byte content digest (kind 3).

const (
	ackRecord    frame.Type = 1
	ackUUID                 = 1
	ackString               = 2
	ackContent              = 3
	ackHeadBytes            = 8 + 4 + 4 + 4
	// maxAckRecord bounds one record: a compaction of a million entries
	// is about 30 MB of it.
	maxAckRecord = 256 << 20
)

var ackRules = frame.Rules{MaxType: ackRecord, MaxRecord: maxAckRecord}

// ackID is one acknowledged entry.
type ackID struct {
	sp   span   // where it was logged
	uuid string // "" for an entry without uuid
	hash uint64 // its content digest when it has no uuid
}

// String names the entry for people: its uuid, or its content digest.
func (a ackID) String() string {
	if a.uuid != "" {
		return a.uuid
	}
	return fmt.Sprintf("content:%016x", a.hash)
}

// ackIDOf is the identity of a stored line whose uuid is known ("" for
// none).
func ackIDOf(sp span, uuid string, line []byte) ackID {
	if uuid != "" {
		return ackID{sp: sp, uuid: uuid}
	}
	return ackID{sp: sp, hash: contentID(line)}
}

// contentID digests a line without uuid in a canonical form (see above).
// A line that is not JSON (never stored by sessiond, but read from a
// file) is digested as it is.
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

// lineID returns the uuid of a line read from a file, or its content
// digest when it has none.
func lineID(line []byte) (uuid string, hash uint64) {
	if id, ok := rawjson.TopLevelString(line, "uuid"); ok && id != "" {
		return id, 0
	}
	return "", contentID(line)
}

// ledger is a transcript's ledger as read back.
type ledger struct {
	ids     []ackID     // in acknowledged order, each logged entry once
	last    fingerprint // the canonical file the last record was written for
	missing int         // entries the writer knew missing then
	records int
	end     int64 // where the last whole record ends
	content bool  // some entries have no uuid
	// damaged says why reading stopped before the end at something that
	// is not a torn last record: a bad record with a whole one written
	// after it, or a whole record that does not decode (a newer
	// release's). nil for a ledger read to its end or to a torn tail.
	damaged error
}

func ledgerSeed(k layout.Key) uint64 {
	h := fnv.New64a()
	h.Write([]byte("sessiond-acked\x00" + k.String()))
	return h.Sum64()
}

func encodeAckRecord(fp fingerprint, missing int, ids []ackID) []byte {
	b := make([]byte, 0, ackHeadBytes+len(ids)*28)
	b = binary.LittleEndian.AppendUint64(b, uint64(fp.size))
	b = binary.LittleEndian.AppendUint32(b, fp.tail)
	b = binary.LittleEndian.AppendUint32(b, uint32(min(missing, 1<<31)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id.sp.seg)
		b = binary.AppendUvarint(b, uint64(id.sp.off))
		switch u, ok := compactID(id.uuid); {
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
	return b
}

var errAckRecord = frame.Error("ledger record does not decode")

func decodeAckRecord(p []byte, fn func(ackID)) (fp fingerprint, missing int, err error) {
	if len(p) < ackHeadBytes {
		return fp, 0, errAckRecord
	}
	fp = fingerprint{int64(binary.LittleEndian.Uint64(p)), binary.LittleEndian.Uint32(p[8:])}
	missing = int(binary.LittleEndian.Uint32(p[12:]))
	n := int(binary.LittleEndian.Uint32(p[16:]))
	p = p[ackHeadBytes:]
	uv := func() (uint64, bool) {
		v, k := binary.Uvarint(p)
		if k <= 0 {
			return 0, false
		}
		p = p[k:]
		return v, true
	}
	for i := 0; i < n; i++ {
		seg, ok1 := uv()
		off, ok2 := uv()
		if !ok1 || !ok2 || len(p) < 1 {
			return fp, 0, errAckRecord
		}
		id := ackID{sp: span{seg: seg, off: int64(off)}}
		kind := p[0]
		p = p[1:]
		switch kind {
		case ackContent:
			if len(p) < 8 {
				return fp, 0, errAckRecord
			}
			id.hash = binary.LittleEndian.Uint64(p)
			p = p[8:]
		case ackUUID:
			if len(p) < 16 {
				return fp, 0, errAckRecord
			}
			var u [16]byte
			copy(u[:], p)
			id.uuid = uuid.UUID(u).String()
			p = p[16:]
		case ackString:
			l, ok := uv()
			if !ok || uint64(len(p)) < l {
				return fp, 0, errAckRecord
			}
			id.uuid = string(p[:l])
			p = p[l:]
		default:
			return fp, 0, errAckRecord
		}
		fn(id)
	}
	if len(p) != 0 {
		return fp, 0, errAckRecord
	}
	return fp, missing, nil
}

// readLedger reads key's ledger; nil when it has none. Reading stops at
// the first record that does not validate: a torn last record, never
// synced, whose compaction never reached its marker, or damage
// (ledger.damaged).
func readLedger(fsy fsys.FS, L layout.Layout, key layout.Key) (*ledger, error) {
	path := L.AckedPath(key)
	f, err := fsy.OpenFile(path, os.O_RDONLY, 0)
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
	led := &ledger{}
	seen := map[span]bool{}
	seed := ledgerSeed(key)
	w := frame.NewWindow(f, fi.Size(), int(min(max(fi.Size(), frame.HeaderSize), 1<<20)))
	for off := int64(0); off < fi.Size(); {
		h, err := frame.Read(w, off, seed, ackRules)
		if err != nil {
			if !frame.IsError(err) {
				return nil, unreadable(what, err)
			}
			later, ferr := frame.FindLaterWrite(w, off, seed, ackRules)
			if ferr != nil {
				return nil, unreadable(what, ferr)
			}
			if later >= 0 {
				led.damaged = fmt.Errorf("the record at offset %d is damaged (%v), and one written after it at %d is whole", off, err, later)
			}
			break
		}
		p := make([]byte, h.Length)
		if err := frame.ReadFull(f, p, off+frame.HeaderSize); err != nil {
			return nil, unreadable(what, err)
		}
		var ids []ackID
		fp, missing, err := decodeAckRecord(p, func(id ackID) { ids = append(ids, id) })
		if err != nil {
			// Checksummed, so a bug or a newer format: stop trusting here.
			led.damaged = fmt.Errorf("the record at offset %d is whole but does not decode (written by a newer release?)", off)
			break
		}
		for _, id := range ids {
			if !seen[id.sp] {
				seen[id.sp] = true
				led.ids = append(led.ids, id)
				led.content = led.content || id.uuid == ""
			}
		}
		led.last, led.missing = fp, missing
		led.records++
		off += h.Size()
		led.end = off
	}
	return led, nil
}

// appendLedger appends one record to the session's ledger and syncs it:
// the entries ids were just compacted into a canonical file about to be
// fp, and missing were known missing.
func (st *state) appendLedger(fp fingerprint, missing int, ids []ackID) error {
	path := st.cfg.Layout.AckedPath(st.key)
	if st.ackEnd < 0 {
		led, err := readLedger(st.fs, st.cfg.Layout, st.key)
		if err != nil {
			return err
		}
		st.ackEnd = 0
		if led != nil {
			st.ackEnd = led.end
		}
	}
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	_, statErr := st.fs.Lstat(path)
	f, err := st.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the ledger of %s: %w", st.key, errdefs.FromIO(err))
	}
	defer f.Close()
	rec := frame.Append(nil, ackRecord, encodeAckRecord(fp, missing, ids), ledgerSeed(st.key), 0)
	fi, err := f.Stat()
	if err == nil && fi.Size() > st.ackEnd {
		// What follows the last whole record is cut: a record never
		// synced whole, or damage, whose bytes are kept first.
		if err := st.keepLedgerDamage(f, fi.Size()); err != nil {
			return err
		}
		err = f.Truncate(st.ackEnd)
	}
	if err == nil {
		_, err = f.Seek(st.ackEnd, io.SeekStart)
	}
	if err == nil {
		err = frame.WriteSynced(f, rec, st.ackEnd)
	}
	if err == nil && statErr != nil {
		err = st.fs.SyncDir(dir)
	}
	if err != nil {
		st.ackEnd = -1
		return fmt.Errorf("append to the ledger of %s: %w", st.key, errdefs.FromIO(err))
	}
	st.ackEnd += int64(len(rec))
	return nil
}

// keepLedgerDamage copies the ledger f (size bytes) aside before
// appendLedger cuts what follows its last whole record, when that is not
// a torn last record but damage: the records after it, and a newer
// release's, are acknowledged entries a human may still want to count.
func (st *state) keepLedgerDamage(f fsys.File, size int64) error {
	led, err := readLedger(st.fs, st.cfg.Layout, st.key)
	if err != nil {
		return err
	}
	if led == nil || led.damaged == nil || led.end != st.ackEnd {
		return nil
	}
	path := st.cfg.Layout.AckedPath(st.key)
	kept, err := st.keepDamaged(path, io.NewSectionReader(f, 0, size))
	if err != nil {
		return err
	}
	st.log.Error("the ledger of acknowledged entries is damaged; what follows its last whole record is cut, and a copy of it is kept",
		zap.String("path", path), zap.String("copy", kept), zap.Int64("whole_up_to", st.ackEnd), zap.Error(led.damaged))
	return nil
}

// resetLedger removes the ledger of a transcript that is made anew: a
// ledger found then is an earlier transcript's at the same key, deleted,
// whose entries the new one never held.
func (st *state) resetLedger() error {
	path := st.cfg.Layout.AckedPath(st.key)
	if err := st.fs.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			st.ackEnd = 0
			return nil
		}
		return fmt.Errorf("remove the ledger of an earlier transcript at %s: %w", st.key, errdefs.FromIO(err))
	}
	st.log.Info("the transcript is new; the ledger of an earlier one at this key was removed")
	st.ackEnd = 0
	return nil
}

// ackMatcher finds which entries of a ledger a transcript holds, line by
// line: by uuid, or by content digest for entries without one (the n-th
// line with a digest holds the n-th entry with it).
type ackMatcher struct {
	led *ledger
	// byUUID: uuid -> ledger indexes. A uuid is acknowledged twice when
	// a client sent it again after a rewrite had dropped it: one line
	// holds both.
	byUUID map[string][]int
	byHash map[uint64][]int // digest -> ledger indexes not matched yet
	at     []int            // ledger index -> line that holds it, -1 if none
}

func newAckMatcher(led *ledger) *ackMatcher {
	m := &ackMatcher{led: led, byUUID: make(map[string][]int, len(led.ids)), at: make([]int, len(led.ids))}
	for i, id := range led.ids {
		m.at[i] = -1
		if id.uuid != "" {
			m.byUUID[id.uuid] = append(m.byUUID[id.uuid], i)
			continue
		}
		if m.byHash == nil {
			m.byHash = map[uint64][]int{}
		}
		m.byHash[id.hash] = append(m.byHash[id.hash], i)
	}
	return m
}

// line matches line n (0-based) of the transcript.
func (m *ackMatcher) line(n int, line []byte) {
	if id, ok := rawjson.TopLevelString(line, "uuid"); ok && id != "" {
		m.uuid(n, id)
		return
	}
	if m.byHash == nil {
		return
	}
	h := contentID(line)
	if q := m.byHash[h]; len(q) > 0 {
		m.at[q[0]] = n
		m.byHash[h] = q[1:]
	}
}

func (m *ackMatcher) uuid(n int, id string) {
	for _, i := range m.byUUID[id] {
		if m.at[i] < 0 {
			m.at[i] = n
		}
	}
}

// missing lists the ledger's entries no line matched, in acknowledged
// order, a uuid once.
func (m *ackMatcher) missing() []ackID {
	var out []ackID
	seen := map[string]bool{}
	for i, n := range m.at {
		id := m.led.ids[i]
		if n >= 0 || id.uuid != "" && seen[id.uuid] {
			continue
		}
		if id.uuid != "" {
			seen[id.uuid] = true
		}
		out = append(out, id)
	}
	return out
}

// lineSplitter feeds an ackMatcher the lines of a stream written through
// it (a tee of what Check reads).
type lineSplitter struct {
	m    *ackMatcher
	n    int
	part []byte
}

func (s *lineSplitter) Write(p []byte) (int, error) {
	k := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.part = append(s.part, p...)
			break
		}
		line := p[:i]
		if len(s.part) > 0 {
			s.part = append(s.part, line...)
			line = s.part
		}
		s.m.line(s.n, line)
		s.n++
		s.part = s.part[:0]
		p = p[i+1:]
	}
	return k, nil
}

// close matches a last line without newline.
func (s *lineSplitter) close() {
	if len(s.part) > 0 {
		s.m.line(s.n, s.part)
		s.n++
		s.part = nil
	}
}
