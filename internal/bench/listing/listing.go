// Package listing measures sessiond's listing of many sessions against
// the official TypeScript SDK's listSessions() on the same folder.
package listing

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// The listing scenario: "listing 10,000 sessions: at least 10x faster than
// the official TypeScript SDK's listSessions on the same folder (run it with
// node in the same run)".
//
// A projects folder of real-looking sessions is built before sessiond
// starts (so sessiond has to index files it never wrote, as on a user's
// first start), listed by the SDK in node, then by sessiond: first right
// after start (racing its start-up WarmIndex), then warm. The page cache is
// warm for both: the folder was just written and fits in memory many times.

// Name is the scenario's name in the suite (--scenarios).
const Name = "listing"

// Title describes the scenario in the report.
const Title = "listing 10,000 sessions: sessiond ListSessions vs the official SDK's listSessions"

// Sizes of the listing scenario at Scale 1.
const (
	listSessions = 10_000
	// listReps is how many sessiond listings are timed (best kept). The
	// SDK is called three times in all (one process with one call, one
	// with two): at Scale 1 one call takes about ten seconds.
	listReps = 5
	sdkReps  = 2
	// listMinSize keeps every session past its first user prompt (at most
	// 2.2 KB into any template), so every session has a summary and is
	// listed by the SDK.
	listMinSize = 4 << 10
)

// listAll lists every session with ListSessions, page after page should
// the daemon ever return fewer than its total.
func listAll(ctx context.Context, c *client.Client) ([]*sessiondv1.SessionInfo, error) {
	var all []*sessiondv1.SessionInfo
	for {
		page, total, err := c.ListSessions(ctx, client.ListOptions{Offset: uint32(len(all))})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) == 0 || len(all) >= int(total) {
			return all, nil
		}
	}
}

// warmLog is the daemon's "indexed sessions on disk" log line (it logs it
// at info level when its start-up WarmIndex ends).
type warmLog struct {
	seen bool
	took float64 // seconds, as zap encodes durations in JSON
}

func readWarmLog(path string) (warmLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return warmLog{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg  string          `json:"msg"`
			Took json.RawMessage `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "indexed sessions on disk" {
			continue
		}
		w := warmLog{seen: true}
		if err := json.Unmarshal(l.Took, &w.took); err != nil {
			// A string form ("1.5s") when the encoder is configured so.
			var s string
			if json.Unmarshal(l.Took, &s) == nil {
				if d, err := time.ParseDuration(s); err == nil {
					w.took = d.Seconds()
				}
			}
		}
		return w, nil
	}
	return warmLog{}, sc.Err()
}

func joinMs(ms []float64) string {
	var s []string
	for _, v := range ms {
		s = append(s, fmt.Sprintf("%.0f", v))
	}
	return strings.Join(s, ", ")
}

func msOf(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func bestDur(ds []time.Duration) time.Duration { return slices.Min(ds) }

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// verifyListing checks that the SDK and sessiond list exactly the sessions
// written, newest first, with the same metadata where both expose it.
func verifyListing(written []listSession, sdk []sdkListInfo, sd []*sessiondv1.SessionInfo) error {
	// What the official listing would show of sessiond's: no sidechain
	// files, none without a summary. Every session written qualifies, so
	// nothing may be filtered out.
	var shown []*sessiondv1.SessionInfo
	for _, in := range sd {
		if !in.GetSidechain() && in.GetSummary() != "" {
			shown = append(shown, in)
		}
	}
	if len(sdk) != len(written) || len(shown) != len(written) || len(sd) != len(written) {
		return fmt.Errorf("%d sessions written; the SDK lists %d, sessiond %d (%d of them as the SDK would show them)",
			len(written), len(sdk), len(sd), len(shown))
	}
	want := map[string]listSession{}
	for _, s := range written {
		want[s.sid] = s
	}
	var errs []string
	mismatches := 0
	bad := func(format string, args ...any) {
		mismatches++
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for i, in := range shown {
		id := in.GetSession().GetSessionId()
		w, ok := want[id]
		if !ok {
			bad("sessiond lists %s, which was not written", id)
			continue
		}
		if pk := in.GetSession().GetProjectKey(); pk != w.project {
			bad("%s: sessiond says project %s, written in %s", id, pk, w.project)
		}
		s := sdk[i]
		if s.SessionID != id {
			bad("position %d: SDK lists %s, sessiond %s", i, s.SessionID, id)
			continue
		}
		if int64(in.GetBytes()) != w.size || s.FileSize != w.size {
			bad("%s: %d bytes written; sessiond says %d, the SDK %d", id, w.size, in.GetBytes(), s.FileSize)
		}
		if in.GetModifiedMs() != w.mtime.UnixMilli() || s.LastModified != w.mtime.UnixMilli() {
			bad("%s: mtime %d; sessiond says %d, the SDK %d", id, w.mtime.UnixMilli(), in.GetModifiedMs(), s.LastModified)
		}
		for _, f := range []struct{ name, sdk, sd string }{
			{"summary", s.Summary, in.GetSummary()},
			{"title", s.CustomTitle, in.GetTitle()},
			{"first prompt", s.FirstPrompt, in.GetFirstPrompt()},
			{"cwd", s.Cwd, in.GetCwd()},
			{"git branch", s.GitBranch, in.GetGitBranch()},
			{"tag", s.Tag, in.GetTag()},
		} {
			if f.sdk != f.sd {
				bad("%s (%s): %s: SDK %q, sessiond %q", id, w.meta, f.name, f.sdk, f.sd)
			}
		}
		if s.CreatedAt != in.GetCreatedMs() {
			bad("%s: created: SDK %d, sessiond %d", id, s.CreatedAt, in.GetCreatedMs())
		}
	}
	// The SDK's own list must hold each written id once.
	seen := map[string]bool{}
	for _, s := range sdk {
		if _, ok := want[s.SessionID]; !ok || seen[s.SessionID] {
			bad("SDK lists %s twice or without it having been written", s.SessionID)
		}
		seen[s.SessionID] = true
	}
	if mismatches > 0 {
		return fmt.Errorf("%d mismatch(es) between what was written, the SDK and sessiond (first %d):\n  %s",
			mismatches, len(errs), strings.Join(errs, "\n  "))
	}
	return nil
}
