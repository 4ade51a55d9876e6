package metrics

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sessiond/sessiond/internal/socket"
)

// Address is where the metrics are served: a TCP address on the loopback
// interface, or a Unix socket.
type Address struct {
	Network string // "tcp" or "unix"
	Addr    string // host:port, or the socket's absolute path
}

func (a Address) String() string {
	if a.Network == "unix" {
		return "unix:" + a.Addr
	}
	return a.Addr
}

// ErrNotLoopback is wrapped by ParseAddress's error for an address other
// hosts could reach.
var ErrNotLoopback = errors.New("not a loopback address")

const addressForms = "127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:/path/to/socket"

// ParseAddress checks the value of --metrics-listen. Only the loopback
// interface and Unix sockets are allowed: the endpoint has no
// authentication, and what it tells (how much the agents on this machine
// write, and when) is for this machine's user, like the transcripts.
func ParseAddress(s string) (Address, error) {
	if path, ok := strings.CutPrefix(s, "unix:"); ok {
		if path == "" {
			return Address{}, fmt.Errorf("--metrics-listen %q names no socket; want %s", s, addressForms)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return Address{}, fmt.Errorf("--metrics-listen %q: %w", s, err)
		}
		return Address{Network: "unix", Addr: abs}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Address{}, fmt.Errorf("--metrics-listen %q: %v; want %s", s, err, addressForms)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (port != "0" && n == 0) {
		return Address{}, fmt.Errorf("--metrics-listen %q: the port must be a number from 0 to 65535 (0: any free port); want %s", s, addressForms)
	}
	if host == "localhost" {
		return Address{Network: "tcp", Addr: s}, nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		what := "host " + host
		switch {
		case host == "":
			what = "an address without a host (every interface)"
		case ip == nil:
			what = "host name " + host + " (only localhost is taken by name)"
		}
		return Address{}, fmt.Errorf("--metrics-listen %q: %s is %w; sessiond serves metrics only on this machine (%s), since the endpoint has no authentication. "+
			"To scrape from elsewhere, run a proxy with authentication (or an agent that forwards) next to sessiond", s, what, ErrNotLoopback, addressForms)
	}
	return Address{Network: "tcp", Addr: s}, nil
}

// Listen opens a. A Unix socket is made as the gRPC socket is (see
// socket.Listen): in a folder only this user controls, mode 0600, a stale
// one replaced, a live one left alone. A TCP listener must have ended up
// on a loopback address (localhost could resolve elsewhere).
func Listen(a Address) (net.Listener, error) {
	switch a.Network {
	case "unix":
		ln, err := socket.Listen(a.Addr)
		if errors.Is(err, socket.ErrAlreadyRunning) {
			return nil, fmt.Errorf("--metrics-listen %s: another process serves on that socket; give another path", a)
		}
		if err != nil {
			return nil, fmt.Errorf("--metrics-listen %s: %w", a, err)
		}
		return ln, nil
	case "tcp":
		ln, err := net.Listen("tcp", a.Addr)
		if err != nil {
			return nil, fmt.Errorf("--metrics-listen %s: %w", a, err)
		}
		if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			ln.Close()
			return nil, fmt.Errorf("--metrics-listen %s: it resolved to %s, which is %w; use 127.0.0.1 or [::1]", a, ln.Addr(), ErrNotLoopback)
		}
		return ln, nil
	}
	return nil, fmt.Errorf("--metrics-listen: unknown network %q", a.Network)
}

// Server serves GET /metrics in Prometheus' text format (or OpenMetrics,
// when the scraper asks for it).
type Server struct {
	http *http.Server
	done chan error
}

// Serve serves m's registry on ln until Close. errLog gets the HTTP
// server's and the handler's errors (nil: discarded).
func (m *Metrics) Serve(ln net.Listener, errLog *log.Logger) *Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: errLog, Registry: m.reg, EnableOpenMetrics: true,
		// A scrape takes a few milliseconds; more at once is a
		// misconfigured scraper, not a reason to do the work again.
		MaxRequestsInFlight: 4, Timeout: 30 * time.Second,
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "sessiond serves its metrics at GET /metrics", http.StatusNotFound)
	})
	s := &Server{done: make(chan error, 1), http: &http.Server{
		Handler: mux, ErrorLog: errLog,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute,
	}}
	go func() { s.done <- s.http.Serve(ln) }()
	return s
}

// Close stops serving: scrapes under way get until ctx ends to finish.
// It closes the listener (and removes a Unix socket's file).
func (s *Server) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		return errors.Join(err, serr)
	}
	return err
}
