// Package inprocess holds the rows of the throughput scenarios that are
// built from sessiond's own packages instead of its binary, and is the only
// bench package that imports them:
//
//   - the ceiling, row (c): the journal engine alone in the bench
//     process (internal/journal, all in ceiling.go), which no command-line
//     flag of sessiond can isolate;
//   - the writer and the daemon run in the bench process (internal/writer,
//     internal/daemon; --target inproc and inproc-daemon, and the suite's
//     --inproc rows), so a CPU profile of the bench covers sessiond's own
//     code;
//   - the echo server, rows (e) and (f): a re-executed bench process that
//     serves with internal/daemon's gRPC transport settings, so that it
//     differs from sessiond only by what it does per call.
//
// Every other scenario drives the sessiond binary through the Go client and
// its flags; keeping the imports of the engine here means a change of the
// engine's package touches this package only.
package inprocess

import (
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

// NewDriver returns the driver of one of this package's targets, writing
// under dir, or false when target is not one of them.
func NewDriver(target, dir string, opts throughput.DaemonDriver) (throughput.Driver, bool) {
	switch target {
	case throughput.TargetCeiling:
		return &ceilingDriver{dir: dir}, true
	case throughput.TargetInProc:
		return &inprocDriver{dir: dir}, true
	case throughput.TargetInProcDaemon:
		return &inprocDaemonDriver{dir: dir, DaemonDriver: throughput.DaemonDriver{MaxConns: opts.MaxConns, Unary: opts.Unary}}, true
	case throughput.TargetEcho, throughput.TargetEchoSync:
		return &echoDriver{dir: dir, sync: target == throughput.TargetEchoSync}, true
	}
	return nil, false
}
