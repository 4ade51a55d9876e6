package daemon

// Procs is how many Ps (GOMAXPROCS) sessiond runs with, given the runtime's
// default and whether the user set GOMAXPROCS, which always wins.
//
// Why more than the CPUs: every session's writer blocks in fdatasync, and
// the Go scheduler counts a goroutine in a system call as holding its P
// until sysmon takes the P back (a tick later at best) and hands it to
// another thread. With as many Ps as CPUs, a few writers waiting on the
// disk leave the runnable goroutines (the other sessions' writers, the
// gRPC readers that would bring their next appends) without a P while the
// CPUs sit idle. With 1,000 sessions written at once on 2 CPUs, 8 Ps gave
// about 1.7 times the appends per second of 2, with no loss for one busy
// session (BENCHMARKS.md); 16 gave no more. A P with nothing to run costs
// only its per-P caches. The bound keeps a large machine from getting
// hundreds of Ps (and a GC sized for them).
func Procs(def int, userSet bool) int {
	if userSet || def < 1 {
		return def
	}
	return min(4*def, def+16)
}
