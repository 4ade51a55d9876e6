package throughput

import (
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// keepAwake occupies one thread of the bench process with a loop of
// sched_yield calls until the returned stop is called, so that one CPU
// never goes idle while a run is measured. It gives way to any thread that
// wants that CPU.
//
// It exists to test a reading of the sequential scenario: that what
// gRPC adds to a durable round trip on this VM is mostly the wake-up of
// idle CPUs (and of the threads parked on them) after each fdatasync, not
// work. A client does not run like this; the runs that use it are
// labelled as a diagnosis.
func keepAwake() (stop func()) {
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !quit.Load() {
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}()
	return func() {
		quit.Store(true)
		<-done
	}
}
