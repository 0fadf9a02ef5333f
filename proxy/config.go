package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"net"
	"os"
	"time"

	"github.com/taskgate/taskgate/proxy/tracing"
)

// Config configures a Handler. Zero fields take the documented defaults.
type Config struct {
	// Upstream is the URL of the upstream MCP endpoint, e.g.
	// http://127.0.0.1:3000/mcp. Required. POSTs to its path are inspected;
	// every other request passes through untouched.
	Upstream string
	// RewriteHost sends the upstream's host in the Host header instead of
	// the client's. Default false: Host and Origin reach the upstream as the
	// client sent them, so the upstream's DNS-rebinding protection works.
	RewriteHost bool
	// MaxBodySize bounds request bodies (413 above it). Default 4 MiB.
	MaxBodySize int
	// MaxResultSize bounds a task's upstream result and any upstream answer
	// taskgate must buffer to rewrite (initialize, tools/list). Default 32 MiB.
	MaxResultSize int
	// StreamIdleTimeout cuts an upstream answer that sends nothing for this
	// long (SSE streams and slow JSON answers alike). Default 10m.
	StreamIdleTimeout time.Duration
	// StreamMaxLifetime caps how long one proxied answer (typically an SSE
	// stream) may last; the client then resumes with Last-Event-ID.
	// Default 1h.
	StreamMaxLifetime time.Duration
	// UpstreamIdleConn is how long an idle upstream keep-alive connection is
	// kept; keep it below the upstream's own idle limit: a request written on a
	// connection the upstream is closing fails although the upstream never
	// saw it.
	// Default 3s.
	UpstreamIdleConn time.Duration
	// DialTimeout bounds connecting to the upstream. Default 5s.
	DialTimeout time.Duration
	// OwnerKey keys the hash that turns an Authorization header (or a
	// session id) into a task owner. Replicas sharing a store must share it.
	// Default: random per process (tasks then only resolve on this process).
	OwnerKey []byte
	// ListPageSize is the tasks/list page size. Default 50.
	ListPageSize int
	// KeepAlive is the interval of SSE comments on long tasks/result waits.
	// Default 15s.
	KeepAlive time.Duration
	// Lease bounds how long a task whose runner died (a killed process)
	// stays working: another process sharing the store fails it at most
	// Lease after the runner's last renewal (engine.LeaseTTL,
	// engine.LeaseSkew, engine.LeaseCheck). Default 15s.
	Lease time.Duration
	// MaxTasksPerOwner caps an owner's unfinished tasks. Default 100; <0 = none.
	MaxTasksPerOwner int
	// AllowedOrigins, when non-empty, answers 403 to requests whose Origin
	// header is present and not in the list (H-02). Default: not checked
	// (the upstream checks Origin itself).
	AllowedOrigins []string
	// ProcessID names this process in leases. Default: hostname + random.
	ProcessID string
	// StoreTimeout is what one task-store operation may take. The store
	// bounds each operation itself (taskstore.Config.OpTimeout; give it the
	// same value); taskgate uses StoreTimeout to cap the session lookups on
	// the pass-through path (at most 500ms) and a runner's last attempt to
	// record an outcome while shutting down. Default 3s.
	StoreTimeout time.Duration
	// TaskRate limits task operations (task calls and tasks/*) per owner
	// and process, in operations per second; lookups of unknown tasks count
	// as 5 (T-77, E-42). Default 100; < 0 disables.
	TaskRate float64
	// TaskBurst is the bucket size of TaskRate. Default 500.
	TaskBurst int
	// QueueMax bounds a task's queue of undelivered messages; over it the
	// oldest progress, then log notifications are dropped, never requests.
	// Default 256.
	QueueMax int
	// UpstreamTLS configures TLS to an https upstream: root CAs, client
	// certificates, ServerName. Default: the system's roots, the URL's host
	// as ServerName, TLS 1.2 or newer. Unused for an http upstream.
	UpstreamTLS *tls.Config
	// Dial, when set, opens every connection to the upstream instead of a
	// TCP dial of Upstream's host: pass-through, rewritten answers, task
	// calls, messages to the upstream and PingUpstream all use it. A stdio
	// upstream (package proxy/stdio) is reached this way, in process.
	// Upstream must still be an http URL (its path is the MCP endpoint).
	Dial func(ctx context.Context) (net.Conn, error)
	// NetIO makes upstream connections plain net.Conns instead of
	// sysconn.Conns (direct system calls, see package sysconn). Default
	// false: direct calls, which cost less CPU per request.
	NetIO bool
	// Tracer makes OpenTelemetry spans of intercepted requests, task calls
	// and store operations (package tracing). Default nil: no tracing, at
	// no cost.
	Tracer *tracing.Tracer
	// PromoteWindow is how long a tools/call of the MCP 2026-07-28 wire
	// that may become a task runs before it does: a call that ends sooner
	// gets its plain result, one whose upstream asks the client something
	// sooner gets an InputRequiredResult. Default 250ms.
	PromoteWindow time.Duration
	// PollHold bounds how long a tasks/get of a working task whose call
	// runs in this process waits for the task to end or ask its client
	// something before it answers: twice the task's delay bound
	// (max(100 ms, 5 % of its age)), at most PollHold (engine.HoldTime);
	// such a task reports a pollInterval shorter than that bound by the
	// round trips (engine.PollInterval). A client that follows
	// pollInterval then learns of the end within the bound with about
	// half the polls. Default 5s; < 0 = answer at once.
	PollHold time.Duration
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.MaxResultSize <= 0 {
		c.MaxResultSize = DefaultMaxResultSize
	}
	def(&c.StreamIdleTimeout, DefaultStreamIdleTimeout)
	def(&c.StreamMaxLifetime, DefaultStreamMaxLifetime)
	def(&c.UpstreamIdleConn, DefaultUpstreamIdleConn)
	def(&c.DialTimeout, DefaultDialTimeout)
	def(&c.KeepAlive, DefaultKeepAlive)
	def(&c.Lease, DefaultLease)
	def(&c.StoreTimeout, DefaultStoreTimeout)
	def(&c.PromoteWindow, DefaultPromoteWindow)
	if c.PollHold == 0 {
		c.PollHold = DefaultPollHold
	}
	if c.TaskRate == 0 {
		c.TaskRate = DefaultTaskRate
	}
	if c.TaskBurst <= 0 {
		c.TaskBurst = DefaultTaskBurst
	}
	if c.QueueMax <= 0 {
		c.QueueMax = DefaultQueueMax
	}
	if c.ListPageSize <= 0 {
		c.ListPageSize = DefaultListPageSize
	}
	if c.MaxTasksPerOwner == 0 {
		c.MaxTasksPerOwner = DefaultMaxTasksPerOwner
	}
	if len(c.OwnerKey) == 0 {
		c.OwnerKey = make([]byte, 32)
		_, _ = rand.Read(c.OwnerKey)
	}
	if c.ProcessID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ProcessID = host + "-" + hex.EncodeToString(b)
	}
}
