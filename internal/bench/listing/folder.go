package listing

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/transcript"
)

// listTemplates are the clean main transcripts of shared/fixtures the
// sessions are cut from (see its SOURCES.md): two Claude Code formats,
// slash commands, inline sidechains, leading summary entries, lines up to
// 119 KB.
var listTemplates = []string{
	"marot__spotter__short.jsonl",
	"marot__spotter__tool_heavy.jsonl",
	"marot__spotter__subagent.jsonl",
	"jimmc414__cctrace__main.jsonl",
	"d-kimuson__claude-code-viewer__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
	"d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
	"d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
}

// listProjects are the project keys the sessions are spread over (the
// first takes half of them), as in a ~/.claude with a few busy projects.
var listProjects = []string{"-home-user-projects-webapp", "-home-user-projects-api", "-home-user-work-infra", "-home-user-src-tools"}

// listSize draws a session's size: most sessions are short, some are
// hundreds of KB, and one in 500 is several MB (the SDK reads only 64 KiB
// at each end of a file; sessiond's first index reads all of it). The mean,
// about 56 KB, is kept modest so that sessiond's first indexing of the
// 10,000 files (tens of MB/s) fits the suite's time budget.
func listSize(r *rand.Rand, large bool) int {
	if large {
		return 2<<20 + r.IntN(3<<20) // 2-5 MiB
	}
	x := r.Float64()
	switch {
	case x < 0.70:
		return listMinSize + r.IntN(28<<10) // 4-32 KiB
	case x < 0.95:
		return 32<<10 + r.IntN(96<<10) // 32-128 KiB
	default:
		return 128<<10 + r.IntN(384<<10) // 128-512 KiB
	}
}

// listTemplate is one fixture transcript with the places of its UUIDs, so
// that copies can be given fresh ones cheaply.
type listTemplate struct {
	name  string
	lines [][]byte
	// uuids[i] are the offsets in lines[i] of UUID tokens other than the
	// session id; sids[i] those of the session id.
	uuids, sids [][]int
}

// findFixtures looks for shared/fixtures (with its SOURCES.md) beside the
// repository: above the working folder or the SDK folder.
func findFixtures(sdkDir string) (string, error) {
	if d := os.Getenv("SESSIOND_FIXTURES"); d != "" {
		return d, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if sdkDir != "" {
		starts = append(starts, sdkDir)
	}
	for _, s := range starts {
		for dir := s; ; {
			cand := filepath.Join(dir, "shared", "fixtures")
			if _, err := os.Stat(filepath.Join(cand, "SOURCES.md")); err == nil {
				return cand, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("shared/fixtures (the real transcripts) not found above the working folder; set SESSIOND_FIXTURES")
}

func loadListTemplates(dir string) ([]*listTemplate, error) {
	var ts []*listTemplate
	for _, name := range listTemplates {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("fixture: %w", err)
		}
		t := &listTemplate{name: name}
		var sid string
		for _, line := range bytes.Split(b, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			if sid == "" {
				var head struct {
					SessionID string `json:"sessionId"`
				}
				if json.Unmarshal(line, &head) == nil && len(head.SessionID) == 36 {
					sid = head.SessionID
				}
			}
			t.lines = append(t.lines, line)
		}
		if sid == "" {
			return nil, fmt.Errorf("fixture %s: no sessionId", name)
		}
		for _, line := range t.lines {
			var us, ss []int
			for _, off := range uuidOffsets(line) {
				if string(line[off:off+36]) == sid {
					ss = append(ss, off)
				} else {
					us = append(us, off)
				}
			}
			t.uuids, t.sids = append(t.uuids, us), append(t.sids, ss)
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// uuidOffsets returns where lowercase 8-4-4-4-12 hex tokens start in b.
func uuidOffsets(b []byte) []int {
	var out []int
	for i := 0; i+36 <= len(b); i++ {
		if isUUIDAt(b, i) {
			out = append(out, i)
			i += 35
		}
	}
	return out
}

func isUUIDAt(b []byte, i int) bool {
	if i > 0 && isHex(b[i-1]) || i+36 < len(b) && isHex(b[i+36]) {
		return false
	}
	for j := 0; j < 36; j++ {
		c := b[i+j]
		switch j {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHex(c) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// listSession is what the folder builder made for one session.
type listSession struct {
	project, sid string
	path         string
	size         int64
	mtime        time.Time
	meta         string // which title/summary line it was given
}

var listTopics = []string{"login redirect loop", "flaky CI on arm64", "N+1 queries in the feed", "dark mode toggle",
	"websocket reconnects", "CSV export of invoices", "rate limiter", "Ünïcödé file names", "migration to Postgres 17",
	"memory leak in the worker pool", "release notes for v2.3", "search ranking (BM25)"}

// buildListSession writes session i and returns it. The content is cut
// from a template (its whole lines, from the start) and, when the session
// is larger than the template, continues with further copies of it whose
// UUIDs get a different first group, so no uuid repeats; every copy keeps
// the session's own id. Some sessions get the metadata lines renameSession,
// the CLI's AI titles, its last-prompt records and tagSession write.
func buildListSession(root string, seed uint64, i, n int, ts []*listTemplate, base time.Time, buf []byte) (listSession, []byte, error) {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	s := listSession{sid: harness.NewUUID(r)}
	s.project = listProjects[0]
	if x := r.IntN(2 * len(listProjects)); x < len(listProjects) {
		s.project = listProjects[x]
	}
	t := ts[r.IntN(len(ts))]
	large := i%500 == 250 || n < 500 && i == n/2
	target := listSize(r, large)
	var meta []byte
	early := false
	topic := listTopics[r.IntN(len(listTopics))]
	switch x := r.IntN(100); {
	case x < 30:
		s.meta = "custom-title"
		meta = transcript.CustomTitleLine(s.sid, fmt.Sprintf("Fix %s (#%d)", topic, i))
	case x < 35:
		// Early in the file: the SDK finds it in the head window only.
		s.meta, early = "custom-title (head)", true
		meta = transcript.CustomTitleLine(s.sid, fmt.Sprintf("Spike: %s", topic))
	case x < 45:
		s.meta = "ai-title"
		meta, _ = json.Marshal(struct {
			Type    string `json:"type"`
			AITitle string `json:"aiTitle"`
			SID     string `json:"sessionId"`
		}{"ai-title", "Investigate " + topic, s.sid})
	case x < 60:
		s.meta = "last-prompt"
		meta, _ = json.Marshal(struct {
			Type       string `json:"type"`
			LastPrompt string `json:"lastPrompt"`
			SID        string `json:"sessionId"`
		}{"last-prompt", "now also add a test for the " + topic + " case, then run the whole suite", s.sid})
	case x < 68:
		s.meta = "tag"
		meta = transcript.TagLine(s.sid, "wip")
	default:
		s.meta = "first prompt"
	}

	buf = buf[:0]
	var tag [8]byte
	for cycle := 0; len(buf) < target; cycle++ {
		// A fresh first group for this copy's UUIDs.
		var word [4]byte
		binary.BigEndian.PutUint32(word[:], r.Uint32())
		hex.Encode(tag[:], word[:])
		for li, line := range t.lines {
			start := len(buf)
			buf = append(buf, line...)
			for _, off := range t.sids[li] {
				copy(buf[start+off:], s.sid)
			}
			for _, off := range t.uuids[li] {
				copy(buf[start+off:], tag[:])
			}
			buf = append(buf, '\n')
			if early && cycle == 0 && li == 1 {
				buf = append(append(buf, meta...), '\n')
			}
			if len(buf) >= target {
				break
			}
		}
	}
	if meta != nil && !early {
		buf = append(append(buf, meta...), '\n')
	}
	dir := filepath.Join(root, "projects", s.project)
	s.path = filepath.Join(dir, s.sid+".jsonl")
	if err := os.WriteFile(s.path, buf, 0o600); err != nil {
		return s, buf, err
	}
	// Distinct mtimes, a second apart: both listings sort newest first,
	// so their orders can be compared.
	s.mtime = base.Add(-time.Duration(i) * time.Second)
	if err := os.Chtimes(s.path, s.mtime, s.mtime); err != nil {
		return s, buf, err
	}
	s.size = int64(len(buf))
	return s, buf, nil
}

// buildListFolder writes n sessions under root/projects, on two
// goroutines.
func buildListFolder(ctx context.Context, root string, seed uint64, n int, ts []*listTemplate) ([]listSession, error) {
	for _, p := range listProjects {
		if err := os.MkdirAll(filepath.Join(root, "projects", p), 0o700); err != nil {
			return nil, err
		}
	}
	out := make([]listSession, n)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	const workers = 2
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := w; i < n; i += workers {
				if err := ctx.Err(); err != nil {
					errs[w] = err
					return
				}
				var err error
				if out[i], buf, err = buildListSession(root, seed, i, n, ts, base, buf); err != nil {
					errs[w] = fmt.Errorf("session %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
