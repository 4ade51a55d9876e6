package torture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sessiond/sessiond/internal/layout"
)

// session is one transcript the clients append to.
type session struct {
	idx        int32
	id, cwd    string
	projectKey string
	path       string // the canonical file: <root>/projects/<key>/<id>.jsonl
	retired    bool
}

// keyState is what the clients know about one entry key.
type keyState struct {
	sess  int32 // the session it was sent to
	cycle int32 // when it was (last) sent
	acked bool  // an Append holding it succeeded
}

// ledger is the clients' own log: every key sent, and which ones the
// daemon acknowledged. It is the reference the files are checked against.
type ledger struct {
	mu       sync.Mutex
	sessions []*session
	keys     map[string]keyState
}

func newLedger() *ledger { return &ledger{keys: make(map[string]keyState)} }

func (l *ledger) addSession(root, cwd, id string) (*session, error) {
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &session{idx: int32(len(l.sessions)), id: id, cwd: cwd, projectKey: pk,
		path: filepath.Join(root, "projects", pk, id+".jsonl")}
	l.sessions = append(l.sessions, s)
	return s, nil
}

func (l *ledger) activeSessions() []*session {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*session
	for _, s := range l.sessions {
		if !s.retired {
			out = append(out, s)
		}
	}
	return out
}

// retire forgets s and its keys (it was verified and purged).
func (l *ledger) retire(s *session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.retired = true
	for k, ks := range l.keys {
		if ks.sess == s.idx {
			delete(l.keys, k)
		}
	}
}

// sent records keys before they go out: from then on they may appear.
func (l *ledger) sent(keys []string, s *session, cycle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		ks := l.keys[k]
		ks.sess, ks.cycle = s.idx, int32(cycle)
		l.keys[k] = ks
	}
}

// acked records keys the daemon acknowledged.
func (l *ledger) acked(keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		ks := l.keys[k]
		ks.acked = true
		l.keys[k] = ks
	}
}

// keyName is the field every torture entry names its key with; content
// strings cannot hold it unescaped (their quotes are escaped), so its
// first occurrence in a line, followed by a colon, is the entry's key.
var keyName = []byte(`"tk"`)

// entryKey extracts the key of a stored line. It tolerates whitespace
// around the colon, so that an entry stored without its whitespace
// compacted is still recognised (and then reported torn: it spans lines).
func entryKey(line []byte) (string, bool) {
	for off := 0; ; {
		i := bytes.Index(line[off:], keyName)
		if i < 0 {
			return "", false
		}
		rest := bytes.TrimLeft(line[off+i+len(keyName):], " \t\r\n")
		off += i + len(keyName)
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if len(rest) == 0 || rest[0] != '"' {
			continue
		}
		rest = rest[1:]
		j := bytes.IndexByte(rest, '"')
		if j <= 0 {
			return "", false
		}
		return string(rest[:j]), true
	}
}

// verdict is what one verification found.
type verdict struct {
	lines, bytes                      uint64
	lost, dup, torn, unknown, misplac uint64
	tempFiles                         uint64
	ambiguousPresent                  []string
	problems                          []string
}

func (v *verdict) problem(format string, args ...any) {
	if len(v.problems) < maxFailures {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// verify reads every active session's canonical file and checks it
// against the ledger: whole JSON lines, each acknowledged key exactly
// once, no key twice, nothing unknown, each key in its own session.
func (l *ledger) verify() (*verdict, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := &verdict{}
	seen := make(map[string]uint32, len(l.keys))
	projects := map[string]bool{}
	for _, s := range l.sessions {
		if s.retired {
			continue
		}
		projects[filepath.Dir(s.path)] = true
		err := scanLines(s.path, func(n int, line []byte, newline bool) {
			v.lines++
			v.bytes += uint64(len(line))
			if newline {
				v.bytes++
			}
			if !newline {
				v.torn++
				v.problem("%s line %d: the last line has no newline (torn): %d bytes: %s", s.path, n, len(line), preview(line))
				return
			}
			if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
				v.torn++
				v.problem("%s line %d is not a whole JSON object (torn or spliced): %d bytes: %s", s.path, n, len(line), preview(line))
				return
			}
			k, ok := entryKey(line)
			if !ok {
				v.unknown++
				v.problem("%s line %d holds no torture key: %s", s.path, n, preview(line))
				return
			}
			ks, ok := l.keys[k]
			if !ok {
				v.unknown++
				v.problem("%s line %d holds key %s, which no client sent", s.path, n, k)
				return
			}
			if ks.sess != s.idx {
				v.misplac++
				v.problem("%s line %d holds key %s, sent to session %s", s.path, n, k, l.sessions[ks.sess].id)
			}
			seen[k]++
		})
		if err != nil {
			return nil, err
		}
	}
	for k, ks := range l.keys {
		n := seen[k]
		switch {
		case ks.acked && n == 0:
			v.lost++
			v.problem("acknowledged entry %s (session %s, cycle %d) is missing", k, l.sessions[ks.sess].id, ks.cycle)
		case n > 1:
			v.dup++
			v.problem("entry %s (session %s, cycle %d, acknowledged %v) is stored %d times", k, l.sessions[ks.sess].id, ks.cycle, ks.acked, n)
		case !ks.acked && n == 1:
			v.ambiguousPresent = append(v.ambiguousPresent, k)
		}
	}
	for dir := range projects {
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp") {
				v.tempFiles++
				v.problem("compaction temp file left in %s: %s", dir, n)
			}
		}
	}
	return v, nil
}

// scanLines calls fn for each line of the file at path (a missing file
// has none), with its 1-based number, without its newline, and whether it
// had one.
func scanLines(path string, fn func(n int, line []byte, newline bool)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 4<<20)
	var long []byte
	for n := 1; ; {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		}
		if len(line) > 0 {
			nl := line[len(line)-1] == '\n'
			if nl {
				line = line[:len(line)-1]
			}
			fn(n, line, nl)
			n++
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// preview quotes the start and end of a line for a problem report.
func preview(b []byte) string {
	if len(b) <= 120 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q…%q", b[:60], b[len(b)-60:])
}
