//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestFullDiskBallastAndCatchUp runs the real daemon on a 48 MiB tmpfs
// holding the transcripts and the state folder, with a 1 MiB ballast and
// two transcripts of 6 MiB. (The filler makes it full whatever its size;
// on 16 MiB, a slow run that acknowledged more before the refusals left
// transcripts the freed disk could not compact: 659 entries against 463
// in a quick run. With transcripts of 2.5 MiB, a compaction could fit in
// the room the release freed, the retained segments' and the log's
// reserve with the ballast's, about 3.5 MiB in one CI run: then no
// compaction stayed deferred for the test to see.)
// The ballast is made at start. A filler file leaves little room, and
// appends go on until the disk is full: the first write that finds it
// full releases the ballast, whose room is then kept for compactions:
// appends are refused with RESOURCE_EXHAUSTED naming the write-ahead
// log's folder and what the append needed. The compactions, which need
// more than that room, are deferred (status shows each with one line, and the lag of the
// transcripts), and everything acknowledged reads back through sessiond.
// Then the filler is deleted, and with no call at all (no flush, no
// append, no restart) the transcripts catch up: every acknowledged entry
// in its canonical file exactly once, nothing deferred, no lag; and the
// ballast is made again.
func TestFullDiskBallastAndCatchUp(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "48m")
	const ballastSize = 1 << 20
	// No retained segments: the room they would give back when the disk
	// fills (the base entries' log, megabytes) would depend on how far
	// the log had rolled, and could let the compactions fit.
	d := diskDaemon(t, disk, "--ballast-size", fmt.Sprint(ballastSize), "--journal-segment-size", fmt.Sprint(1<<20), "--journal-retention", "0",
		"--journal-max-size", fmt.Sprint(4<<20), "--idle-compact", "200ms", "--compact-within", "200ms", "--idle-retire", "1s")
	pid := d.Pid()
	ballast := filepath.Join(d.state, "ballast")
	journalDir := filepath.Join(d.state, "journal")
	if fi, err := os.Stat(ballast); err != nil || fi.Size() != ballastSize {
		t.Fatalf("no ballast of %d bytes at start: %v, %v", ballastSize, fi, err)
	}
	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	// Only a bound against a hang: the test writes and compacts 12 MiB
	// of entries, and more in rewrites, on a small disk, which a loaded
	// CI machine has taken over two minutes to do.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.GetDisk(); !b.GetBallastPresent() || b.GetBallastReleased() || b.GetBallastBytes() != ballastSize || b.GetBallastPath() != ballast {
		t.Fatalf("status at start: %v", b)
	}

	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	sessions := []client.Session{{Cwd: cwd, ID: uuid.NewString()}, {Cwd: cwd, ID: uuid.NewString()}}
	l := newDiskLedger()
	// Transcripts of about 6 MiB each first: compacting one needs more
	// room than the release frees.
	for i := 0; i < 768; i++ {
		k := fmt.Sprintf("base-%d", i)
		if err := l.append(c, sessions[i%2], []string{k}, [][]byte{diskEntry(k, true, 16<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sessions {
		if _, err := c.Flush(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// A compaction keeps the transcript it replaced open until the
	// session's next compaction or idle tick, to rescue lines another
	// program appends to it late (foreign.go): that room is free only once
	// the writer lets go. Sized before, the filler would leave the disk
	// the replaced transcripts' room (about 4 MiB here) more than meant,
	// which the appends would fill, and the transcripts would then lag by
	// more than the disk can compact once the filler is gone. A second
	// flush, with nothing to compact, lets them go now.
	for _, s := range sessions {
		if _, err := c.Flush(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	filler := filepath.Join(disk, "filler")
	writeFiller(t, filler, freeBytes(t, disk)-(256<<10))

	// Append until the ballast is gone, appends are refused and a
	// compaction waits for space. (Whether the transcripts' compactions
	// fit in the room the release freed depends on how far they lagged
	// when the disk filled, which depends on the machine's speed: those
	// that fit are done, the appends go on, and the transcripts grow
	// until one does not.)
	var refusals []error
	released, deferredSeen := false, false
	for i := 0; i < 3000 && (len(refusals) < 5 || !deferredSeen); i++ {
		k := fmt.Sprintf("e-%d", i)
		if err := l.append(c, sessions[i%2], []string{k}, [][]byte{diskEntry(k, i%3 != 0, 16<<10)}); err != nil {
			if _, serr := os.Stat(ballast); errors.Is(serr, os.ErrNotExist) {
				released = true
				refusals = append(refusals, err)
			}
			if st, err := c.Status(ctx); err == nil && len(st.GetDisk().GetDeferred()) > 0 {
				deferredSeen = true
			}
		}
	}
	if !released {
		t.Fatal("the ballast was never released: the disk did not fill, or the release does not happen")
	}
	if len(refusals) == 0 {
		t.Fatal("no append was refused once the ballast's room was used too")
	}
	for _, err := range refusals {
		st, _ := status.FromError(err)
		if st.Code() != codes.ResourceExhausted {
			t.Errorf("refused append: %v, want ResourceExhausted: %s", st.Code(), st.Message())
			continue
		}
		if m := st.Message(); !strings.Contains(m, "the disk holding "+journalDir+" is full") || !strings.Contains(m, "bytes in "+journalDir) || !strings.Contains(m, "needs ") {
			t.Errorf("the refusal does not say which folder is full and how much is needed: %q", m)
		}
	}
	d.requireSameProcess(t, pid)

	// The compactions that do not fit are deferred (the idle rule tries
	// them), one status line each, and the transcripts lag.
	var deferred []*sessiondv1.DeferredCompaction
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err = c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if deferred = st.GetDisk().GetDeferred(); len(deferred) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(deferred) == 0 {
		t.Fatalf("no compaction deferred on the full disk: %v", st.GetDisk())
	}
	for _, df := range deferred {
		if m := df.GetMessage(); !strings.HasPrefix(m, "compaction deferred: need ") || !strings.Contains(m, " bytes in ") {
			t.Errorf("deferred compaction line %q", m)
		}
	}
	if b := st.GetDisk(); !b.GetBallastReleased() || b.GetLagSessions() == 0 || b.GetLagBytes() == 0 {
		t.Errorf("status on the full disk: %v; want the ballast released and the lag shown", b)
	}
	out, _, code := d.ctl("", "status")
	for _, want := range []string{"COMPACTION DEFERRED", "compaction deferred: need ", "BALLAST RELEASED", "not yet compacted"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("sessionctl status (exit %d) does not show %q:\n%s", code, want, out)
		}
	}
	t.Logf("full: %d acknowledged, %d refused; %d compactions deferred, lag %d sessions %d bytes",
		len(l.acked), len(refusals), len(deferred), st.GetDisk().GetLagSessions(), st.GetDisk().GetLagBytes())
	for _, s := range sessions {
		seen := l.counts(t, "read through sessiond on the full disk", readViaDaemon(t, c, s))
		l.checkExactlyOnce(t, "read through sessiond on the full disk, session "+s.ID, s.ID, seen)
	}

	// Space is back: the transcripts catch up by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	caughtUp := func() bool {
		st, err := c.Status(ctx)
		if err != nil || len(st.GetDisk().GetDeferred()) > 0 || st.GetDisk().GetLagSessions() > 0 {
			return false
		}
		for _, s := range sessions {
			data, err := os.ReadFile(d.transcript(pk, s.ID))
			if err != nil {
				return false
			}
			n := 0
			l.mu.Lock()
			for _, sid := range l.acked {
				if sid == s.ID {
					n++
				}
			}
			l.mu.Unlock()
			if strings.Count(string(data), "\n") < n {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !caughtUp(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			st, _ := c.Status(ctx)
			t.Fatalf("the transcripts did not catch up within 30 s of space being freed: %v", st.GetDisk())
		}
	}
	d.requireSameProcess(t, pid)
	for _, s := range sessions {
		data, err := os.ReadFile(d.transcript(pk, s.ID))
		if err != nil {
			t.Fatal(err)
		}
		seen := l.counts(t, "canonical file after the catch-up", data)
		if ph := l.checkExactlyOnce(t, "canonical file after the catch-up, session "+s.ID, s.ID, seen); len(ph) > 0 {
			t.Errorf("%d refused entries stored all the same: %v", len(ph), ph)
		}
	}

	// The ballast comes back.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fi, err := os.Stat(ballast)
		if err == nil && fi.Size() == ballastSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ballast was not made again once space was back: %v, %v", fi, err)
		}
	}
	if st, err := c.Status(ctx); err != nil || !st.GetDisk().GetBallastPresent() || st.GetDisk().GetBallastReleased() {
		t.Errorf("status once space is back: %v, %v", st.GetDisk(), err)
	}
	d.requireSameProcess(t, pid)
}
