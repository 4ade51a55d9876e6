// Package pgtest runs a throwaway PostgreSQL server for tests and
// benchmarks: Debian's server binaries (initdb, postgres) on a data folder
// in a temp dir, listening only on a Unix socket in that dir (no TCP
// port, so parallel tests and other servers on the machine never clash).
//
// PostgreSQL refuses to run as root, and tests here usually run as root
// (CI does): the server then runs as the unprivileged `postgres` user
// the Debian package creates (else `nobody`), which owns the temp dir.
// As a normal user it runs as that user.
//
// A Server can be stopped cleanly, killed with SIGKILL (the postmaster
// and every backend, as a crash would) and started again on the same data
// folder, for fault tests.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Port is the port number the server's socket file is named after
// (.s.PGSQL.<Port>); nothing listens on TCP.
const Port = 5432

// InstallHint says how to get the server binaries.
const InstallHint = "install Debian's postgresql package: `make tools` does it when run as root, else `sudo apt-get install postgresql`"

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin, $SESSIOND_PG_BIN or PATH")

// BinDir finds the folder holding initdb and postgres: $SESSIOND_PG_BIN,
// else the newest /usr/lib/postgresql/<version>/bin (Debian's layout,
// which keeps them off PATH), else PATH.
func BinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("SESSIOND_PG_BIN"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("SESSIOND_PG_BIN=%s holds no initdb and postgres: %w", d, ErrNoBinaries)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest version first: "15" sorts before "9" as text, so by number.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", ErrNoBinaries
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Options tune a server.
type Options struct {
	// Settings are extra `-c name=value` settings for postgres.
	Settings map[string]string
	// Durable keeps fsync on. Off by default: a killed server loses
	// nothing the kernel holds, which is what the crash tests kill, and
	// on a shared 2-core machine fsync makes every commit slow.
	Durable bool
	// Log receives progress lines (a test's t.Logf); nil: none.
	Log func(format string, args ...any)
	// Parent is the folder the server's temp dir is made in ("": the
	// system's temp folder).
	Parent string
}

// Server is one throwaway PostgreSQL server.
type Server struct {
	bin  string
	dir  string // the temp dir: data/, sock/, postgres.log
	cred *syscall.Credential
	opt  Options

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// New makes the temp dir and its data folder (initdb), without starting
// the server.
func New(opt Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opt.Parent, "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, cred: cred, opt: opt}
	if err := s.prepare(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// credential is who the server runs as: nil (this process's user) unless
// we are root, which initdb and postgres refuse.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root, and PostgreSQL refuses to: no `postgres` or `nobody` user to run it as")
}

func (s *Server) prepare() error {
	sock := s.SocketDir()
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if s.cred != nil {
		for _, p := range []string{s.dir, sock} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("hand %s to uid %d for PostgreSQL: %w", p, s.cred.Uid, err)
			}
		}
	}
	cmd := exec.Command(filepath.Join(s.bin, "initdb"), "-D", s.DataDir(), "-U", "postgres",
		"-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// Dir is the server's temp dir; DataDir its data folder; SocketDir the
// folder of its Unix socket.
func (s *Server) Dir() string       { return s.dir }
func (s *Server) DataDir() string   { return filepath.Join(s.dir, "data") }
func (s *Server) SocketDir() string { return filepath.Join(s.dir, "sock") }
func (s *Server) LogPath() string   { return filepath.Join(s.dir, "postgres.log") }

// DSN is a connection string for database db (the superuser's,
// trusted: no password is checked) over the Unix socket.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", db, s.SocketDir(), Port)
}

// Start starts the server and waits until it accepts connections. A
// server killed a moment ago may leave backends that have not noticed yet;
// Start tries again while they go.
func (s *Server) Start(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 0; ; attempt++ {
		err := s.startOnce(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		s.logf("pgtest: start attempt %d failed, retrying: %v", attempt+1, err)
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Server) startOnce(ctx context.Context) error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("pgtest: server already running")
	}
	args := []string{"-D", s.DataDir(), "-k", s.SocketDir(), "-p", strconv.Itoa(Port),
		"-c", "listen_addresses=", "-c", "shared_buffers=32MB", "-c", "max_connections=60",
		"-c", "dynamic_shared_memory_type=mmap"}
	if !s.opt.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	for k, v := range s.opt.Settings {
		args = append(args, "-c", k+"="+v)
	}
	logf, err := os.OpenFile(s.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed when this process dies, so no server outlives a test run
	// (its backends follow once they notice).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.mu.Unlock()
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	for {
		select {
		case <-exited:
			s.mu.Lock()
			s.cmd = nil
			s.mu.Unlock()
			return fmt.Errorf("postgres exited while starting: %s", s.logTail())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := pgconn.Connect(cctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		if ctx.Err() != nil {
			s.Kill()
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down cleanly (fast shutdown: sessions are
// disconnected) and waits for it.
func (s *Server) Stop() error { return s.signal(syscall.SIGINT, 30*time.Second) }

// Kill sends SIGKILL to the postmaster and every backend, as a crash of
// the machine's PostgreSQL would (what the kernel holds stays), and waits
// for the postmaster to be gone.
func (s *Server) Kill() { s.signal(syscall.SIGKILL, 30*time.Second) }

// Running reports whether the server was started and not stopped.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Pids are the postmaster's and its children's (the backends and
// auxiliary processes running now), for a benchmark that pins them.
func (s *Server) Pids() []int {
	pid := s.Pid()
	if pid <= 0 {
		return nil
	}
	return append([]int{pid}, children(pid)...)
}

// Pid is the postmaster's process id, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) signal(sig syscall.Signal, within time.Duration) error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if sig == syscall.SIGKILL {
		killTree(cmd.Process.Pid)
	} else {
		cmd.Process.Signal(sig)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(within):
		killTree(cmd.Process.Pid)
		<-exited
		return fmt.Errorf("postgres did not stop within %v of %v; killed", within, sig)
	}
}

// Close stops the server (killing it if it does not stop) and removes its
// temp dir.
func (s *Server) Close() error {
	if err := s.Stop(); err != nil {
		s.Kill()
	}
	return os.RemoveAll(s.dir)
}

// CreateDatabase creates database name (the caller's own, so tests sharing
// a server do not see each other's tables) and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	c, err := pgconn.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, `CREATE DATABASE "`+strings.ReplaceAll(name, `"`, `""`)+`"`).ReadAll(); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.LogPath())
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (s *Server) logf(format string, args ...any) {
	if s.opt.Log != nil {
		s.opt.Log(format, args...)
	}
}

// killTree kills the postmaster pid and its children. Backends put
// themselves in process groups of their own (setsid), so a signal to the
// postmaster's group misses them: the postmaster is stopped first (so it
// neither forks nor reacts), its children found in /proc and killed, then
// it.
func killTree(pid int) {
	syscall.Kill(pid, syscall.SIGSTOP)
	for _, c := range children(pid) {
		syscall.Kill(c, syscall.SIGKILL)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// children lists the processes whose parent is pid (Linux /proc; none
// elsewhere, where backends exit once they notice the postmaster died).
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses,
		// so the fields are counted after its last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}
