package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// silentSocket is a socket whose server never answers: the kernel takes
// the connections, nobody reads them (a daemon stopped with SIGSTOP, or
// hung). gRPC waits up to its 20 s connect timeout for the handshake.
func silentSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock
}

// callTimeout is the deadline each call gets; a call must return within
// callGrace of it.
const (
	callTimeout = 300 * time.Millisecond
	callGrace   = 1500 * time.Millisecond
)

// everyCall is each public method of Client that talks to the daemon.
var everyCall = map[string]func(context.Context, *Client) error{
	"Append": func(ctx context.Context, c *Client) error { _, err := c.Append(ctx, sess, []byte(`{}`)); return err },
	"Append with uuids": func(ctx context.Context, c *Client) error {
		_, err := c.Append(ctx, sess, []byte(`{"uuid":"0d5c1f3e-8a8b-4f0e-9a59-1a4c2b3d4e5f"}`))
		return err
	},
	"AppendBatch": func(ctx context.Context, c *Client) error {
		_, err := c.AppendBatch(ctx, sess, "b1", []byte(`{}`))
		return err
	},
	"Flush": func(ctx context.Context, c *Client) error { _, err := c.Flush(ctx, sess); return err },
	"FlushAll": func(ctx context.Context, c *Client) error {
		return c.FlushAll(ctx, func(*sessiondv1.FlushedSession) error { return nil })
	},
	"Read": func(ctx context.Context, c *Client) error {
		return c.Read(ctx, sess, ReadOptions{}, func(*sessiondv1.Entry) error { return nil })
	},
	"List":   func(ctx context.Context, c *Client) error { _, err := c.List(ctx, "/w", ""); return err },
	"Info":   func(ctx context.Context, c *Client) error { _, err := c.Info(ctx, sess); return err },
	"Status": func(ctx context.Context, c *Client) error { _, err := c.Status(ctx); return err },
	"ListSessions": func(ctx context.Context, c *Client) error {
		_, _, err := c.ListSessions(ctx, ListOptions{})
		return err
	},
	"Check": func(ctx context.Context, c *Client) error {
		return c.Check(ctx, sess, func(*sessiondv1.CheckResponse) error { return nil })
	},
	"CheckAll": func(ctx context.Context, c *Client) error {
		return c.CheckAll(ctx, sess, func(*sessiondv1.CheckResponse) error { return nil })
	},
	"Repair": func(ctx context.Context, c *Client) error {
		return c.Repair(ctx, sess, true, func(*sessiondv1.RepairResponse) error { return nil })
	},
	"Fork":        func(ctx context.Context, c *Client) error { _, err := c.Fork(ctx, sess, "", "", ""); return err },
	"Pull":        func(ctx context.Context, c *Client) error { _, err := c.Pull(ctx, sess); return err },
	"Rename":      func(ctx context.Context, c *Client) error { _, err := c.Rename(ctx, sess, "t"); return err },
	"Tag":         func(ctx context.Context, c *Client) error { _, err := c.Tag(ctx, sess, "t"); return err },
	"SetArchived": func(ctx context.Context, c *Client) error { _, err := c.SetArchived(ctx, sess, true); return err },
	"Delete":      func(ctx context.Context, c *Client) error { _, err := c.Delete(ctx, sess, false); return err },
	"Restore":     func(ctx context.Context, c *Client) error { _, err := c.Restore(ctx, sess); return err },
	"RestoreAll":  func(ctx context.Context, c *Client) error { _, err := c.RestoreAll(ctx, sess); return err },
	"ListTrash": func(ctx context.Context, c *Client) error {
		return c.ListTrash(ctx, sess, func(*sessiondv1.TrashedCopy) error { return nil })
	},
	"Subkeys": func(ctx context.Context, c *Client) error { _, err := c.Subkeys(ctx, sess); return err },
}

// TestCallsEndWithTheirDeadline: against a daemon that never answers,
// every call returns soon after its deadline, with an error that is
// context.DeadlineExceeded to errors.Is and DEADLINE_EXCEEDED to
// status.Code. An append stream opened with a context of its own would
// wait out gRPC's 20 s connect timeout instead.
func TestCallsEndWithTheirDeadline(t *testing.T) {
	sock := silentSocket(t)
	for name, call := range everyCall {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A client per call: each waits for a connection of its own.
			c, err := Dial(sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			start := time.Now()
			err = call(ctx, c)
			if took := time.Since(start); took > callTimeout+callGrace {
				t.Errorf("returned after %v with a %v deadline", took, callTimeout)
			}
			if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("error %v (%T, code %v), want one that is context.DeadlineExceeded", err, err, status.Code(err))
			}
		})
	}
}

// TestFollowEndsWithItsContext: Follow returns nil when its context ends,
// even while it waits for a daemon that never answers.
func TestFollowEndsWithItsContext(t *testing.T) {
	c, err := Dial(silentSocket(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(callTimeout, cancel)
	start := time.Now()
	err = c.Follow(ctx, sess, ReadOptions{}, func(*sessiondv1.Entry) error { return nil })
	if took := time.Since(start); took > callTimeout+callGrace {
		t.Errorf("Follow returned %v after the cancel", took-callTimeout)
	}
	if err != nil {
		t.Errorf("Follow ended by its context: %v, want nil", err)
	}
}

// TestAppendCancelledReturnsAtOnce: a cancel (sessionctl's Ctrl-C) ends
// an append waiting for a daemon that does not answer, with
// context.Canceled; nothing was sent, so the outcome is known.
func TestAppendCancelledReturnsAtOnce(t *testing.T) {
	c, err := Dial(silentSocket(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(callTimeout, cancel)
	start := time.Now()
	_, err = c.AppendBatch(ctx, sess, "b1", []byte(`{}`))
	if took := time.Since(start); took > callTimeout+callGrace {
		t.Errorf("returned %v after the cancel", took-callTimeout)
	}
	if !errors.Is(err, context.Canceled) || status.Code(err) != codes.Canceled {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("error %v says the outcome is unknown, but no connection was ever made", err)
	}
}

// TestAppendWithoutDaemonEndsWithItsDeadline: with no daemon at all, an
// append that may be retried (its entries have uuids) retries until its
// deadline and no further; one that may not fails at once. Neither can
// have stored anything.
func TestAppendWithoutDaemonEndsWithItsDeadline(t *testing.T) {
	c, err := Dial(filepath.Join(shortDir(t), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"Append with uuids", "AppendBatch"} {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		start := time.Now()
		err := everyCall[name](ctx, c)
		took := time.Since(start)
		cancel()
		if took > callTimeout+callGrace {
			t.Errorf("%s: returned after %v with a %v deadline", name, took, callTimeout)
		}
		var de *DialError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &de) {
			t.Errorf("%s: %v, want the deadline, after the dial error", name, err)
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s: %v says the outcome is unknown; nothing could be sent", name, err)
		}
	}
	_, err = c.Append(context.Background(), sess, []byte(`{}`))
	var de *DialError
	if !errors.As(err, &de) || errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("append without uuids: %v, want the dial error at once", err)
	}
}
