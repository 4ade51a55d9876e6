package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// status: what sessiond is doing, its disk, mirror and leases.

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's state and counters",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client) error {
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(st)
			}
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "version\t%s\n", st.GetVersion())
			fmt.Fprintf(w, "pid\t%d\n", st.GetPid())
			fmt.Fprintf(w, "up since\t%s\n", time.UnixMilli(st.GetStartedMs()).Format(time.RFC3339))
			fmt.Fprintf(w, "socket\t%s\n", st.GetSocket())
			fmt.Fprintf(w, "transcripts\t%s\n", st.GetRoot())
			fmt.Fprintf(w, "state\t%s\n", st.GetStateDir())
			fmt.Fprintf(w, "open sessions\t%d\n", st.GetActiveSessions())
			fmt.Fprintf(w, "appends\t%d\n", st.GetAppends())
			fmt.Fprintf(w, "entries stored\t%d (+%s dropped)\n", st.GetEntriesStored(), count(st.GetEntriesDuplicate(), "duplicate"))
			fmt.Fprintf(w, "journal syncs\t%d (%s)\n", st.GetJournalSyncs(), humanBytes(st.GetJournalBytes()))
			fmt.Fprintf(w, "compactions\t%d (%s written)\n", st.GetCompactions(), humanBytes(st.GetCompactedBytes()))
			fmt.Fprintf(w, "recovered at start\t%s\n", count(st.GetRecoveredSessions(), "session"))
			fmt.Fprintf(w, "trash\t%s, %s (each kept %s; sessionctl trash lists them)\n", count(st.GetTrashCopies(), "deleted copy"),
				humanBytes(st.GetTrashBytes()), retention(st.GetTrashRetentionSeconds()))
			if n := st.GetReplayPending(); n > 0 {
				fmt.Fprintf(w, "replaying\t%s still to move from their journals into their transcripts (served meanwhile)\n", count(n, "session"))
			}
			if st.GetDraining() {
				fmt.Fprintf(w, "state\tdraining\n")
			}
			for _, op := range st.GetOperations() {
				fmt.Fprintf(w, "in progress\t%s\n", describeOperation(op))
			}
			if r := st.GetJournalRetention(); r != nil {
				fmt.Fprintf(w, "log retention\t%s\n", describeRetention(r))
			}
			for _, e := range st.GetRecoveryErrors() {
				fmt.Fprintf(w, "RECOVERY FAILED\t%s\n", e)
			}
			if total, shown := st.GetRecoveryErrorsTotal(), uint64(len(st.GetRecoveryErrors())); total > shown {
				fmt.Fprintf(w, "RECOVERY FAILED\t%d more (sessiond's log names each)\n", total-shown)
			}
			if n := st.GetPastRecoveryFailures(); n > 0 {
				fmt.Fprintf(w, "recovery failures\t%s recovered since (healthy again)\n", count(n, "session"))
			}
			describeDisk(w, st.GetDisk())
			describeMirror(w, st.GetMirror(), time.Now())
			describeLeases(w, st.GetLeases())
			for _, a := range st.GetAcknowledgedMissing() {
				fmt.Fprintf(w, "ENTRIES MISSING\t%s: %s sessiond acknowledged no longer in it (another program rewrote it); `sessionctl check %s` names them, `sessionctl repair %s` puts back what the journal retains\n",
					a.GetSession().GetPath(), count(a.GetCount(), "entry"), a.GetSession().GetSessionId(), a.GetSession().GetSessionId())
			}
			if total, shown := st.GetAcknowledgedMissingTotal(), uint64(len(st.GetAcknowledgedMissing())); total > shown {
				fmt.Fprintf(w, "ENTRIES MISSING\t%s more (`sessionctl check --all` names them)\n", count(total-shown, "transcript"))
			}
			return w.Flush()
		}),
	}
}

// describeDisk adds status's lines about disk space: the lag of the
// transcripts behind what sessiond acknowledged, the compactions waiting
// for space (one line each, the first ten), and the ballast.
func describeDisk(w io.Writer, d *sessiondv1.DiskStatus) {
	if n := d.GetLagSessions(); n > 0 {
		fmt.Fprintf(w, "not yet compacted\t%s, %s (served from the journal)\n", count(n, "session"), humanBytes(d.GetLagBytes()))
	}
	for i, c := range d.GetDeferred() {
		if i == 10 {
			fmt.Fprintf(w, "COMPACTION DEFERRED\t%d more\n", max(d.GetDeferredTotal(), uint64(len(d.GetDeferred())))-10)
			break
		}
		ref := c.GetSession()
		fmt.Fprintf(w, "COMPACTION DEFERRED\t%s/%s: %s (since %s)\n", ref.GetProjectKey(), ref.GetSessionId(), c.GetMessage(),
			time.UnixMilli(c.GetSinceMs()).Format(time.RFC3339))
	}
	switch {
	case d.GetBallastBytes() == 0:
	case d.GetBallastReleased():
		fmt.Fprintf(w, "BALLAST RELEASED\t%s (%s) was deleted when the disk filled; made again once there is room for it twice over\n",
			d.GetBallastPath(), humanBytes(d.GetBallastBytes()))
	case d.GetBallastPresent():
		fmt.Fprintf(w, "ballast\t%s (%s kept for compactions on a full disk)\n", d.GetBallastPath(), humanBytes(d.GetBallastBytes()))
	default:
		fmt.Fprintf(w, "ballast\t%s (%s) not made yet: the disk has not had room for it twice over\n", d.GetBallastPath(), humanBytes(d.GetBallastBytes()))
	}
}

// describeMirror adds status's lines about the PostgreSQL mirror, when
// there is one: where, whether connected, how far behind, the last error.
func describeMirror(w io.Writer, m *sessiondv1.MirrorStatus, now time.Time) {
	if !m.GetConfigured() {
		return
	}
	state := "connected to"
	if !m.GetConnected() {
		state = "NOT CONNECTED to"
	}
	fmt.Fprintf(w, "mirror\t%s %s: %s up to date, %d rows written since start\n", state, m.GetTarget(),
		count(m.GetTranscripts(), "transcript"), m.GetRowsWritten())
	if n := m.GetEntriesBehind(); n > 0 {
		since := ""
		if ms := m.GetOldestBehindMs(); ms > 0 {
			since = fmt.Sprintf(", the oldest for %s", now.Sub(time.UnixMilli(ms)).Round(time.Second))
		}
		fmt.Fprintf(w, "mirror behind\t%s (%s)%s; appends go on locally, the mirror catches up by itself\n", count(n, "entry"), humanBytes(m.GetBytesBehind()), since)
	}
	if n := m.GetUnchecked(); n > 0 || m.GetListing() {
		more := ""
		if m.GetListing() {
			more = " (still listing them)"
		}
		fmt.Fprintf(w, "mirror unchecked\t%s not yet compared with PostgreSQL (since start, since their lines moved, or since a delete, restore, title or archive mark)%s\n", count(n, "transcript"), more)
	}
	if e := m.GetLastError(); e != "" {
		fmt.Fprintf(w, "mirror last error\t%s (%s)\n", e, time.UnixMilli(m.GetLastErrorMs()).Format(time.RFC3339))
	}
}

// describeLeases says which machine this sessiond writes as and which
// sessions another machine took over from it.
func describeLeases(w io.Writer, l *sessiondv1.LeaseStatus) {
	if l.GetMachineId() == "" {
		return
	}
	fmt.Fprintf(w, "leases\tmachine %q holds %s\n", l.GetMachineId(), count(l.GetHeld(), "session"))
	for _, f := range l.GetFenced() {
		fmt.Fprintf(w, "fenced\t%s: appends to it are refused here; its local entries are kept\n", f)
	}
	if total, shown := l.GetFencedTotal(), uint64(len(l.GetFenced())); total > shown {
		fmt.Fprintf(w, "fenced\t%s more\n", count(total-shown, "session"))
	}
}

// describeRetention says what the journal keeps after compaction.
func describeRetention(r *sessiondv1.JournalRetention) string {
	if r.GetRetentionMs() <= 0 {
		return "none (--journal-retention 0): repair cannot put back entries another program's rewrite dropped"
	}
	s := fmt.Sprintf("%s after compaction, up to %s: %s kept (%s)", time.Duration(r.GetRetentionMs())*time.Millisecond,
		humanBytes(r.GetSizeBudget()), count(r.GetRetainedSegments(), "segment"), humanBytes(r.GetRetainedBytes()))
	if ms := r.GetOldestRetainedMs(); ms > 0 {
		s += ", the oldest since " + time.UnixMilli(ms).Format(time.RFC3339)
	}
	return s
}
