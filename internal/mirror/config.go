package mirror

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/writer"
)

// DefaultTable is the reference adapter's default table name.
const DefaultTable = "claude_session_store"

// tableRule is the reference adapter's rule for the table name (it is
// spliced into the SQL, so nothing else may pass).
var tableRule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxTable keeps the reference index's name, <table>_list_idx, within
// PostgreSQL's 63-byte identifiers: a longer one would be cut, and two
// tables could then share an index name.
const maxTable = 63 - len("_list_idx")

// CheckTable refuses a table name the reference adapter would refuse, or
// one PostgreSQL would cut short.
func CheckTable(name string) error {
	if !tableRule.MatchString(name) {
		return fmt.Errorf("mirror table %q is not a plain SQL identifier (letters, digits and _, not starting with a digit: the reference adapter's rule): %w", name, errdefs.ErrInvalidArgument)
	}
	if len(name) > maxTable {
		return fmt.Errorf("mirror table %q is longer than %d characters (PostgreSQL would cut its index name, %s_list_idx, short): %w", name, maxTable, name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Source is where the mirror reads the transcripts: a reader.Reader over
// the writers, and the catalog.
type Source interface {
	ReadLines(ctx context.Context, key layout.Key, from, under uint64, send func([]reader.Entry) error) (lineage, total uint64, err error)
	AllKeys(projectKey string, subagents bool) ([]layout.Key, error)
	Subkeys(key layout.Key) ([]string, error)
	// Sidecars reads a session's sidecar files (sidecar.Names).
	Sidecars(key layout.Key) ([]sidecar.Sidecar, error)
}

// Config sets a mirror up. Zero values take the defaults below.
type Config struct {
	// DSN is the PostgreSQL connection string (a postgres:// URL or
	// key=value pairs, as libpq takes them). Its password is never
	// logged nor reported.
	DSN string
	// Table is the reference adapter's table to mirror into.
	Table  string
	Logger *zap.Logger
	// Clock paces the retries; tests move a clock.Fake.
	Clock clock.Clock
	// Workers is how many transcripts are mirrored at once (each holds
	// one connection while it writes).
	Workers int
	// BatchEntries and BatchBytes bound one transaction's rows.
	BatchEntries int
	BatchBytes   int
	// RetryMin and RetryMax bound the backoff while PostgreSQL cannot be
	// reached (doubling from RetryMin) and before a transcript whose
	// mirroring failed is tried again.
	RetryMin, RetryMax time.Duration
	// Pace is the least time between two turns at one transcript: what
	// is appended meanwhile goes in the next turn's transaction, so that
	// a busy session costs sessiond and PostgreSQL a few transactions a
	// second, not one per group commit (measured under the parallel64
	// load: the local throughput with the mirror on went from 71 % to
	// 83 % of off with 500 ms). A transcript's first change after a quiet
	// spell goes at once; the lag's age grows by at most this much; Drain
	// does not wait for it. Negative: none.
	Pace time.Duration
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout time.Duration

	// MachineID names this sessiond as a lease holder (package lease): two
	// machines sharing the database must have different ones. Empty:
	// "sessiond".
	MachineID string
	// LeaseTTL is how long a session's lease lasts unless renewed (every
	// third of it while the session is appended to): a machine that stops
	// renewing (paused, cut off, killed) loses the session to another
	// after at most this long.
	LeaseTTL time.Duration
	// LeaseWait bounds how long an append waits for PostgreSQL to say
	// whether the session is leased elsewhere, when this machine does not
	// hold its lease already; past it the append goes on locally.
	LeaseWait time.Duration
	// LeaseIdle: a session without appends for this long has its lease
	// released (the writer's idle retirement, by default).
	LeaseIdle time.Duration
}

// Defaults.
const (
	DefaultWorkers      = 4
	DefaultBatchEntries = 2000
	DefaultBatchBytes   = 8 << 20
	DefaultPace         = 500 * time.Millisecond
	DefaultRetryMin     = 100 * time.Millisecond
	DefaultRetryMax     = 5 * time.Second
	DefaultConnect      = 5 * time.Second
	DefaultLeaseTTL     = 30 * time.Second
	DefaultLeaseWait    = 200 * time.Millisecond
	DefaultLeaseIdle    = writer.DefaultIdleRetire
)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.BatchEntries <= 0 {
		c.BatchEntries = DefaultBatchEntries
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.RetryMin <= 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(DefaultRetryMax, c.RetryMin)
	}
	if c.Pace == 0 {
		c.Pace = DefaultPace
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnect
	}
	if c.MachineID == "" {
		c.MachineID = "sessiond"
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseWait <= 0 {
		c.LeaseWait = DefaultLeaseWait
	}
	if c.LeaseIdle <= 0 {
		c.LeaseIdle = DefaultLeaseIdle
	}
}

// poolConfig parses dsn. Its errors never hold the password: pgx's own
// message may quote the connection string, so a parse error is reported
// with the string's secrets cut out.
func poolConfig(dsn string, workers int, connect time.Duration) (*pgxpool.Config, *redactor, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, nil, fmt.Errorf("mirror: empty PostgreSQL connection string (postgres://user:password@host:5432/db, or key=value pairs): %w", errdefs.ErrInvalidArgument)
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		r := &redactor{}
		return nil, r, fmt.Errorf("mirror: not a PostgreSQL connection string (postgres://user:password@host:5432/db, or key=value pairs): %s: %w",
			r.clean(err.Error()), errdefs.ErrInvalidArgument)
	}
	r := &redactor{secret: pc.ConnConfig.Password}
	if u, err := url.Parse(dsn); err == nil {
		if p, ok := u.User.Password(); ok {
			r.raw = p // as typed, percent-encoded or not
		}
	}
	pc.MaxConns = int32(workers) + 1
	pc.MinConns = 0
	pc.ConnConfig.ConnectTimeout = connect
	return pc, r, nil
}

// redactor cuts a connection string's password out of text.
type redactor struct {
	secret string // the password pgx parsed
	raw    string // as it stands in the URL
}

var (
	urlPassword = regexp.MustCompile(`(://[^:/@\s]*:)[^@\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)`)
)

const hidden = "xxxxx"

func (r *redactor) clean(s string) string {
	if r == nil {
		return s
	}
	for _, p := range []string{r.secret, r.raw, url.QueryEscape(r.secret), url.PathEscape(r.secret)} {
		if p != "" {
			s = strings.ReplaceAll(s, p, hidden)
		}
	}
	s = urlPassword.ReplaceAllString(s, "${1}"+hidden+"@")
	return kvPassword.ReplaceAllString(s, "${1}"+hidden)
}

// Target describes where dsn points, without its password: what logs and
// Status show.
func Target(dsn string) string {
	r := &redactor{}
	if pc, err := pgxpool.ParseConfig(dsn); err == nil {
		r.secret = pc.ConnConfig.Password
		cc := pc.ConnConfig
		host := cc.Host
		if strings.HasPrefix(host, "/") {
			return fmt.Sprintf("user=%s database=%s socket=%s port=%d", cc.User, cc.Database, host, cc.Port)
		}
		return fmt.Sprintf("user=%s database=%s host=%s port=%d", cc.User, cc.Database, host, cc.Port)
	}
	return r.clean(dsn)
}
