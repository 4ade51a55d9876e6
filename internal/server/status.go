package server

import (
	"context"
	"os"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/writer"
)

// statusListMax is the most items Status lists of each kind (recovery
// errors, transcripts missing entries and their ids, deferred compactions,
// fenced sessions); it counts them all. A store where thousands of
// transcripts lost entries would otherwise make an answer over the
// message limit, and status would fail when it matters most.
const statusListMax = 100

// Status implements sessiond.v1.Sessiond.
func (s *Server) Status(ctx context.Context, _ *sessiondv1.StatusRequest) (*sessiondv1.StatusResponse, error) {
	st, trash := s.m.Stats(), s.m.Trash().Usage()
	mirrorSt, leaseSt := s.mirrorStatus()
	var ops []*sessiondv1.Operation
	for _, o := range s.m.Operations() {
		ops = append(ops, &sessiondv1.Operation{Id: o.ID, Kind: o.Kind, Unit: o.Unit, Done: uint64(o.Done), Total: uint64(o.Total), StartedMs: o.Started.UnixMilli()})
	}
	cfg := s.m.Config()
	ret := &sessiondv1.JournalRetention{
		RetentionMs: max(cfg.JournalRetention, 0).Milliseconds(), SizeBudget: uint64(cfg.JournalRetentionSize),
		RetainedSegments: uint64(st.RetainedSegments), RetainedBytes: uint64(st.RetainedBytes),
	}
	if !st.OldestRetained.IsZero() {
		ret.OldestRetainedMs = st.OldestRetained.UnixMilli()
	}
	var missing []*sessiondv1.AcknowledgedMissing
	for _, in := range st.Missing[:min(len(st.Missing), statusListMax)] {
		missing = append(missing, &sessiondv1.AcknowledgedMissing{Session: s.resolved(in.Key), Count: uint64(in.Count),
			Ids: in.IDs[:min(len(in.IDs), statusListMax)], DetectedMs: in.DetectedMs})
	}
	return &sessiondv1.StatusResponse{
		JournalRetention: ret, AcknowledgedMissing: missing, AcknowledgedMissingTotal: uint64(len(st.Missing)),
		Operations: ops,
		Version:    s.info.Version, Pid: int32(os.Getpid()), StartedMs: s.info.Started.UnixMilli(),
		Socket: s.info.Socket, Root: s.info.Root, StateDir: s.info.StateDir,
		ActiveSessions: uint32(st.ActiveSessions), Appends: st.Appends, EntriesStored: st.EntriesStored,
		EntriesDuplicate: st.EntriesDuplicate, JournalSyncs: st.JournalSyncs, JournalBytes: st.JournalBytes,
		Compactions: st.Compactions, CompactedBytes: st.CompactedBytes, RecoveredSessions: st.RecoveredSessions,
		Draining: s.draining.Load(), ReplayPending: st.ReplayPending,
		RecoveryErrors: st.RecoveryErrors[:min(len(st.RecoveryErrors), statusListMax)], RecoveryErrorsTotal: uint64(len(st.RecoveryErrors)),
		PastRecoveryFailures: st.PastRecoveryFailures, Disk: s.diskStatus(st.Disk),
		TrashCopies: uint32(trash.Copies), TrashBytes: uint64(trash.Bytes), TrashRetentionSeconds: uint64(trash.Retention.Seconds()),
		Mirror: mirrorSt, Leases: leaseSt,
	}, nil
}

// mirrorStatus is the mirror's status and the leases' (nil without
// --mirror), from one look at the mirror.
func (s *Server) mirrorStatus() (*sessiondv1.MirrorStatus, *sessiondv1.LeaseStatus) {
	if s.info.Mirror == nil {
		return &sessiondv1.MirrorStatus{}, nil
	}
	ms := s.info.Mirror.Status()
	leases := &sessiondv1.LeaseStatus{MachineId: ms.MachineID, Held: ms.Leases,
		Fenced: ms.Fenced[:min(len(ms.Fenced), statusListMax)], FencedTotal: uint64(len(ms.Fenced))}
	out := &sessiondv1.MirrorStatus{Configured: true, Target: ms.Target, Connected: ms.Connected,
		EntriesBehind: ms.EntriesBehind, BytesBehind: ms.BytesBehind, Transcripts: ms.Transcripts,
		Unchecked: ms.Unchecked, RowsWritten: ms.RowsWritten, LastError: ms.LastError, Listing: ms.Listing}
	if !ms.OldestBehind.IsZero() {
		out.OldestBehindMs = ms.OldestBehind.UnixMilli()
	}
	if !ms.LastErrorAt.IsZero() {
		out.LastErrorMs = ms.LastErrorAt.UnixMilli()
	}
	return out, leases
}

func (s *Server) diskStatus(d writer.DiskStats) *sessiondv1.DiskStatus {
	out := &sessiondv1.DiskStatus{BallastPath: d.BallastPath, BallastBytes: uint64(d.BallastSize),
		BallastPresent: d.BallastPresent, BallastReleased: d.BallastReleased, LagSessions: d.LagSessions, LagBytes: d.LagBytes,
		DeferredTotal: uint64(len(d.Deferred))}
	for _, x := range d.Deferred[:min(len(d.Deferred), statusListMax)] {
		out.Deferred = append(out.Deferred, &sessiondv1.DeferredCompaction{Session: s.resolved(x.Key), Dir: x.Dir,
			NeedBytes: x.Need, FreeBytes: x.Free, SinceMs: x.Since.UnixMilli(), Message: x.Line()})
	}
	return out
}
