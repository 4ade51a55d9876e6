package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func count(t *testing.T, dsn string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// TestKillRestartKeepsCommitted: a server killed with SIGKILL starts
// again on its data folder with every committed row; one stopped cleanly
// too; the DSN reaches it over its socket.
func TestKillRestartKeepsCommitted(t *testing.T) {
	s := Start(t, Options{})
	ctx := context.Background()
	dsn, err := s.CreateDatabase(ctx, "kill")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Kill()
	if s.Running() || s.Pid() != 0 {
		t.Fatal("server still running after Kill")
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection to a killed server still answers")
	}
	c.Close(ctx)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Pid() == pid {
		t.Fatal("restarted server has the killed one's pid")
	}
	if n := count(t, dsn); n != 100 {
		t.Fatalf("after kill and restart: %d rows, want 100", n)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, dsn); n != 100 {
		t.Fatalf("after stop and start: %d rows, want 100", n)
	}
}
