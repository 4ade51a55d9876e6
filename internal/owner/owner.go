// Package owner makes one process the only one that changes a sessiond
// state folder and the transcripts root it serves.
//
// Everything sessiond promises rests on one writer per file: a second
// process that opened the same journal would cut, move aside or
// compact what the first acknowledged. Acquire takes an exclusive lock on
// the state folder and one on the root folder (flock on the folders
// themselves, so no file of the user's root is added and a lock cannot be
// lost by deleting a lock file), before anything in either is read or
// changed. A process that cannot take them gets an *OwnedError naming the
// holder and changes nothing. The kernel drops the locks when the holder
// dies, however it dies, so there is never a stale lock to clear by hand.
//
// Acquire also checks the state folder's format stamp, so a sessiond
// never reads a state folder laid out by a newer one.
package owner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// ErrOwned is wrapped by Acquire's error when another process holds the
// state folder or the root.
var ErrOwned = errors.New("owned by another process")

// ErrFormat is wrapped by Acquire's error when the state folder's format
// is one this build does not read.
var ErrFormat = errors.New("state folder format not understood")

// Format is the state folder's layout version this build reads and
// writes. Raise it whenever a change to the state folder would make an
// older sessiond misread it; the older one then refuses to start on it.
const Format = 2

const (
	// InfoName is the file in the state folder that says who holds it,
	// for the message a refused process prints. It is advice only: the
	// lock is the folder's.
	InfoName   = "owner"
	FormatName = "format"
	formatTag  = "sessiond-state"
)

// Holder describes a process that holds a state folder.
type Holder struct {
	PID      int       `json:"pid"`
	Program  string    `json:"program"`
	Version  string    `json:"version,omitempty"`
	Socket   string    `json:"socket,omitempty"`
	Root     string    `json:"root"`
	StateDir string    `json:"state_dir"`
	Started  time.Time `json:"started"`
}

// Self describes this process; Acquire fills Root and StateDir.
func Self(version, socket string) Holder {
	return Holder{PID: os.Getpid(), Program: filepath.Base(os.Args[0]), Version: version, Socket: socket,
		Started: time.Now().UTC().Truncate(time.Second)}
}

// Claim is a held pair of locks. Release drops them; so does the
// process's end.
type Claim struct {
	layout layout.Layout
	state  io.Closer
	root   io.Closer // nil when the root is the state folder itself
	fresh  bool
}

// Fresh reports whether the state folder had no format stamp: no sessiond
// ran on it before, so the start is worth announcing (what it makes there).
func (c *Claim) Fresh() bool { return c.fresh }

// Layout is the folders the claim covers.
func (c *Claim) Layout() layout.Layout { return c.layout }

// Release drops both locks. It is safe to call more than once.
func (c *Claim) Release() error {
	if c == nil {
		return nil
	}
	var err error
	if c.root != nil {
		err = c.root.Close()
		c.root = nil
	}
	if c.state != nil {
		err = errors.Join(err, c.state.Close())
		c.state = nil
	}
	return err
}

// Acquire locks l's state folder, then its root (creating either if
// missing), checks the state folder's format and records h as the holder.
// The state folder's lock comes first and is taken before anything in it
// is read: a second process stops at it having changed nothing. Acquire
// never waits for a lock.
func Acquire(fsy fsys.FS, l layout.Layout, h Holder) (*Claim, error) {
	if l.StateDir == "" || l.Root == "" {
		return nil, fmt.Errorf("owner: state folder and root must be set: %w", errdefs.ErrInvalidArgument)
	}
	h.Root, h.StateDir = l.Root, l.StateDir
	if h.PID == 0 {
		h.PID = os.Getpid()
	}
	state, err := lockFolder(fsy, l.StateDir)
	if err != nil {
		return nil, refusal(fsy, "state folder", l.StateDir, err)
	}
	c := &Claim{layout: l, state: state}
	if filepath.Clean(l.Root) != filepath.Clean(l.StateDir) {
		if c.root, err = lockFolder(fsy, l.Root); err != nil {
			c.Release()
			return nil, refusal(fsy, "transcripts root", l.Root, err)
		}
	}
	fresh, err := checkFormat(fsy, l.StateDir)
	if err != nil {
		c.Release()
		return nil, err
	}
	c.fresh = fresh
	writeInfo(fsy, l.StateDir, h)
	return c, nil
}

// lockFolder locks dir, making it (0700) first when it is missing.
func lockFolder(fsy fsys.FS, dir string) (io.Closer, error) {
	lk, err := fsy.Lock(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := fsys.MkdirAll(fsy, dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
		lk, err = fsy.Lock(dir)
	}
	return lk, err
}

// refusal turns a failed lock into the error a user reads.
func refusal(fsy fsys.FS, what, path string, err error) error {
	if !errors.Is(err, fsys.ErrLocked) {
		return fmt.Errorf("lock the %s %s: %w", what, path, errdefs.FromIO(err))
	}
	e := &OwnedError{What: what, Path: path}
	e.PID = lockHolderPID(fsy, path)
	if what == "state folder" {
		if h, ok := readInfo(fsy, path); ok && (e.PID == 0 || h.PID == e.PID) {
			e.Holder = &h
			e.PID = h.PID
		}
	} else if e.PID != 0 {
		if h, ok := holderOf(fsy, e.PID); ok {
			e.Holder = &h
		}
	}
	return e
}

// OwnedError says which process holds a folder this one needs.
type OwnedError struct {
	What   string  // "state folder" or "transcripts root"
	Path   string  // the folder
	PID    int     // the holder's pid; 0 when it cannot be told
	Holder *Holder // what the holder recorded; nil when unknown
}

func (e *OwnedError) Unwrap() error { return ErrOwned }

func (e *OwnedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "another sessiond already owns the %s %s", e.What, e.Path)
	switch {
	case e.PID == os.Getpid():
		b.WriteString(" (this very process: is --root the same folder as --state-dir, through a link?)")
		return b.String()
	case e.Holder != nil:
		h := e.Holder
		fmt.Fprintf(&b, " (pid %d, %s", h.PID, h.Program)
		if h.Version != "" {
			fmt.Fprintf(&b, " %s", h.Version)
		}
		if h.Socket != "" {
			fmt.Fprintf(&b, ", serving on %s", h.Socket)
		}
		if e.What != "state folder" {
			fmt.Fprintf(&b, ", state folder %s", h.StateDir)
		} else {
			fmt.Fprintf(&b, ", root %s", h.Root)
		}
		if !h.Started.IsZero() {
			fmt.Fprintf(&b, ", since %s", h.Started.Local().Format("2006-01-02 15:04:05"))
		}
		b.WriteString(")")
	case e.PID != 0:
		fmt.Fprintf(&b, " (pid %d)", e.PID)
	}
	b.WriteString(". Only one sessiond may change these files: stop the other one first (systemctl --user stop sessiond")
	if e.PID != 0 && e.PID != os.Getpid() {
		fmt.Fprintf(&b, ", or kill %d", e.PID)
	}
	b.WriteString("), or give this one its own --state-dir and --root")
	return b.String()
}

// checkFormat reads the state folder's format stamp, writing it when the
// folder has none (a new folder). Only absence counts as none: a stamp
// that cannot be read stops the start, and so does an unstamped folder
// holding what development builds before format 2 wrote.
func checkFormat(fsy fsys.FS, dir string) (fresh bool, err error) {
	path := filepath.Join(dir, FormatName)
	b, rerr := readFile(fsy, path)
	if errors.Is(rerr, fs.ErrNotExist) {
		if err := checkUnstamped(fsy, dir); err != nil {
			return false, err
		}
		if err := fsys.WriteFileAtomicOwned(fsy, path, ".format.tmp", 0o600, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "%s %d\n", formatTag, Format)
			return err
		}); err != nil {
			return false, fmt.Errorf("write the state folder's format stamp %s: %w", path, errdefs.FromIO(err))
		}
		return true, nil
	}
	if rerr != nil {
		return false, fmt.Errorf("read the state folder's format stamp %s: %w", path, errdefs.FromIO(rerr))
	}
	v, ok := parseFormat(b)
	if !ok {
		return false, fmt.Errorf("%s is not a sessiond format stamp (%q): is %s another program's folder? %w", path, firstLine(b), dir, ErrFormat)
	}
	if v > Format {
		return false, fmt.Errorf("the state folder %s has format %d, written by a newer sessiond; this one reads format %d: run the newer sessiond, or give this one another --state-dir: %w", dir, v, Format, ErrFormat)
	}
	if v < Format {
		return false, fmt.Errorf("the state folder %s has format %d, which this sessiond (format %d) does not read: %s: %w", dir, v, Format, oldFormatAdvice(dir), ErrFormat)
	}
	return false, nil
}

// checkUnstamped refuses a state folder without a stamp that holds a
// journal in the layout of development builds before format 2, in
// <state>/wal: starting on it would serve those sessions without the
// entries there. (Their older journals per transcript, under
// <state>/journal/<project>/, are refused by package journal itself: this
// runs before the socket is held, and must not read the journal's folder.)
func checkUnstamped(fsy fsys.FS, dir string) error {
	if _, err := fsy.Lstat(filepath.Join(dir, "wal")); err == nil {
		return fmt.Errorf("the state folder %s holds a journal in %s, the layout of a development build of sessiond before format %d: %s: %w", dir, filepath.Join(dir, "wal"), Format, oldFormatAdvice(dir), ErrFormat)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("look for an older journal in %s: %w", dir, errdefs.FromIO(err))
	}
	return nil
}

func oldFormatAdvice(dir string) string {
	return "finish with the build that wrote it (sessionctl flush --all, then stop it, so that every entry is in its transcript), then move " + dir + " aside or give this sessiond another --state-dir"
}

func parseFormat(b []byte) (int, bool) {
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] != formatTag {
		return 0, false
	}
	v, err := strconv.Atoi(f[1])
	return v, err == nil && v > 0
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// writeInfo records h for the messages of processes refused later. It is
// advice, not state: written without a sync, and a failure is ignored (a
// refused process then names the holder by pid alone).
func writeInfo(fsy fsys.FS, dir string, h Holder) {
	b, err := json.Marshal(h)
	if err != nil {
		return
	}
	tmp := filepath.Join(dir, ".owner.tmp")
	f, err := fsy.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	_, werr := f.Write(append(b, '\n'))
	if cerr := f.Close(); werr != nil || cerr != nil {
		fsy.Remove(tmp)
		return
	}
	if fsy.Rename(tmp, filepath.Join(dir, InfoName)) != nil {
		fsy.Remove(tmp)
	}
}

// readInfo reads what the holder of dir recorded.
func readInfo(fsy fsys.FS, dir string) (Holder, bool) {
	var h Holder
	b, err := readFile(fsy, filepath.Join(dir, InfoName))
	if err != nil || json.Unmarshal(b, &h) != nil || h.PID <= 0 {
		return Holder{}, false
	}
	return h, true
}

func readFile(fsy fsys.FS, path string) ([]byte, error) {
	f, err := fsy.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<16))
}
