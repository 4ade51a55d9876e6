// Package testharness runs the real sessiond the way a user would, for the
// programs that test and measure it from outside: the end-to-end tests, the
// benchmark tool (sessiond-bench) and the torture tool (sessiond-torture).
// It builds the sessiond and sessionctl binaries from this module once per
// process, starts a daemon on a socket and folders of the caller's choice,
// waits until it serves, and signals, stops or kills it.
//
// It does not import testing: the bench and torture tools are ordinary
// programs. Tests wrap its errors in t.Fatal themselves.
package testharness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Commands are the module's programs Build makes.
var Commands = []string{"sessiond", "sessionctl"}

const modulePath = "github.com/sessiond/sessiond"

// BuildOptions choose how the binaries are built.
type BuildOptions struct {
	// Race builds them with the race detector, so a daemon under a race
	// test is checked too.
	Race bool
}

// Binaries is a folder holding the built programs.
type Binaries struct{ Dir string }

// Sessiond is the path of the sessiond binary.
func (b Binaries) Sessiond() string { return filepath.Join(b.Dir, "sessiond") }

// Sessionctl is the path of the sessionctl binary.
func (b Binaries) Sessionctl() string { return filepath.Join(b.Dir, "sessionctl") }

// built is one Build result, made once per options.
type built struct {
	once sync.Once
	bins Binaries
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[BuildOptions]*built{}
)

// Build builds every program of Commands into a fresh temp folder, once
// per process and options: later calls, concurrent ones included, get the
// same folder (or the same error). RemoveBuilt removes the folders. It
// runs `go build`, so the process must run inside this module's source
// tree (a test does).
func Build(opts BuildOptions) (Binaries, error) {
	buildsMu.Lock()
	b := builds[opts]
	if b == nil {
		b = &built{}
		builds[opts] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "sessiond-bin-")
		if err != nil {
			b.err = err
			return
		}
		if err := BuildInto(context.Background(), dir, opts, Commands...); err != nil {
			os.RemoveAll(dir)
			b.err = err
			return
		}
		b.bins = Binaries{Dir: dir}
	})
	return b.bins, b.err
}

// RemoveBuilt removes every folder Build made; a TestMain calls it once
// the tests are done.
func RemoveBuilt() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for _, b := range builds {
		if b.bins.Dir != "" {
			os.RemoveAll(b.bins.Dir)
		}
	}
	builds = map[BuildOptions]*built{}
}

// BuildInto builds the named programs of this module's cmd folder (sessiond,
// sessionctl...) into dir.
//
// -buildvcs=true: the binaries report the commit they were built from
// (`--version`), whatever GOFLAGS says. (Go finds the commit only where
// .git is a folder: not in a git worktree, whose .git is a file.)
func BuildInto(ctx context.Context, dir string, opts BuildOptions, cmds ...string) error {
	args := []string{"build", "-buildvcs=true", "-o", dir + string(filepath.Separator)}
	if opts.Race {
		args = append(args, "-race")
	}
	for _, c := range cmds {
		args = append(args, modulePath+"/cmd/"+c)
	}
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}
