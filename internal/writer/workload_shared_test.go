package writer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// The session of wlSharedFile, whose transcript the agent's CLI writes too.
var kShared = fixedKey(11, "")

// sharedTurn is what the CLI writes of turn n into kShared's transcript
// (lines without uuid among them, and one it never mirrors), and what the
// SDK mirrors of it: the same lines in every run of the workload.
func sharedTurn(n int) (cli, mirrored []string) {
	queue := fmt.Sprintf(`{"type":"queue-operation","operation":"dequeue","n":%d,"sessionId":%q}`, n, kShared.SessionID)
	user := line(kShared, fmt.Sprintf("00000000-0000-4000-9000-%012d", n), fmt.Sprintf("prompt %d", n))
	api := fmt.Sprintf(`{"type":"api-request","requestId":"req_%d"}`, n)
	last := fmt.Sprintf(`{"type":"last-prompt","lastPrompt":"prompt %d","sessionId":%q}`, n, kShared.SessionID)
	return []string{queue, user, api, last}, []string{queue, user, last}
}

// wlSharedFile: the agent's CLI and sessiond share the transcript (the
// defaults of both). The CLI wrote turn 0 before sessiond ever saw the
// session, then writes turns 1 and 2, a line at a time (in the harness
// another program's write counts once synced; the CLI's are not, which
// sessiond covers by syncing before it answers); the first turn's mirrored batch arrives,
// which takes both turns in, the writer retires, and the second turn's
// batch arrives: its lines without uuid are matched from what the ledger
// recorded. Then a flush. Whatever the crash or fault, once recovered the
// adapter sends both batches again (their answers may have been lost):
// every entry is a duplicate, and the transcript holds each of the CLI's
// lines once (the harness checks the lines sent, the check the resends).
func wlSharedFile() *workload {
	turn0, _ := sharedTurn(0)
	wl := &workload{
		name:  "shared-file",
		probe: []layout.Key{kShared, kBy},
		setup: func(c *fstest.CrashFS) {
			if err := c.WriteFile(crashLayout.TranscriptPath(kShared), []byte(strings.Join(turn0, "\n")+"\n"), 0o600); err != nil {
				panic(err)
			}
		},
		allowed: func(w *world, key layout.Key, l string) bool { return key == kShared && slices.Contains(turn0, l) },
	}
	batch := func(n int) AppendOptions {
		return AppendOptions{BatchID: fmt.Sprintf("shared-%d", n), SharedFile: true}
	}
	wl.run = func(w *world) {
		for n := 1; n <= 2; n++ {
			cli, _ := sharedTurn(n)
			for _, l := range cli {
				// A line at a time, as the CLI appends them.
				if w.foreign(kShared, l) != nil {
					return // a CLI whose write failed goes no further
				}
			}
			w.setFlag(fmt.Sprintf("turn %d written", n))
		}
		_, m1 := sharedTurn(1)
		w.appendOpt(0, kShared, batch(1), m1...)
		w.do("retire "+kShared.String(), func() error {
			_, err := w.m.flush(w.ctx, kShared, session.RetireIfDone, "test")
			return err
		})
		_, m2 := sharedTurn(2)
		w.appendOpt(0, kShared, batch(2), m2...)
		w.append(1, kBy, line(kBy, w.id(), "by1"))
		w.flush(kShared)
	}
	wl.check = func(w *world, v *fstest.CrashFS) []string {
		var want []string
		for n := 1; n <= 2 && w.flag(fmt.Sprintf("turn %d written", n)); n++ {
			cli, _ := sharedTurn(n)
			want = append(want, cli...)
		}
		if len(want) == 0 {
			return nil
		}
		vc := v.KillClone()
		m := newCrashManager(w.t, vc, w.wl)
		defer closeQuietly(m)
		if _, err := m.Recover(w.ctx); err != nil {
			return []string{fmt.Sprintf("shared-file check: recover: %v", err)}
		}
		var probs []string
		for n := 1; n <= len(want)/4; n++ {
			_, mirrored := sharedTurn(n)
			raw := make([][]byte, len(mirrored))
			for i, l := range mirrored {
				raw[i] = []byte(l)
			}
			res, err := m.AppendBatch(w.ctx, kShared, raw, batch(n))
			if err != nil {
				probs = append(probs, fmt.Sprintf("turn %d's mirrored batch sent again: %v", n, err))
				continue
			}
			for i, r := range res.Results {
				if r.Outcome != Duplicate {
					probs = append(probs, fmt.Sprintf("turn %d's mirrored entry %d, sent again, was stored: the CLI's copy is in the file", n, i))
				}
			}
		}
		if _, err := m.Flush(w.ctx, kShared); err != nil {
			probs = append(probs, fmt.Sprintf("shared-file check: flush: %v", err))
		}
		data, _ := vc.ReadFile(crashLayout.TranscriptPath(kShared))
		lines := strings.Split(string(data), "\n")
		for _, l := range want {
			if n := slices.Index(lines, l); n < 0 || slices.Contains(lines[n+1:], l) {
				probs = append(probs, fmt.Sprintf("the CLI's line is in the transcript %d times after the batches were sent again: %.120q", strings.Count(string(data), l+"\n"), l))
			}
		}
		return probs
	}
	return wl
}
