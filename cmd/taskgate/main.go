// Command taskgate is a reverse proxy that adds the MCP 2025-11-25 tasks
// feature to an MCP server that speaks Streamable HTTP but has no tasks.
//
// Usage:
//
//	taskgate --upstream http://127.0.0.1:3000/mcp [flags]
//	taskgate --upstream-command 'npx -y @modelcontextprotocol/server-memory' [flags]
//	taskgate version | --version
//	taskgate healthcheck [--admin-listen ADDR] [--path /readyz]
//	taskgate tasks list|get ID|cancel ID [--json]
//	taskgate reload
//
// Every flag can also be set through the environment variable named in
// --help (TASKGATE_ + the flag in upper case with '-' as '_'); a flag given
// on the command line wins.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/proxy/admin"
	"github.com/taskgate/taskgate/proxy/sched"
	"github.com/taskgate/taskgate/proxy/stdio"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/taskstore"
)

// Defaults of the flags that configure the command itself. The flags that
// configure the proxy and the stdio upstream take theirs from packages proxy
// and proxy/stdio (proxy.Default*, stdio.Default*), so taskgate without a
// flag and the packages with a zero Config behave alike.
const (
	defaultListen = "127.0.0.1:8080"
	// defaultAdminListen is 8081, beside the proxy's 8080: 9090 is
	// Prometheus's own port.
	defaultAdminListen = "127.0.0.1:8081"
	defaultLogLevel    = "info"
	defaultLogFormat   = "json"
	// defaultProcs: one processor costs the least CPU per request beside an
	// upstream on the same machine, and kept the rate of Go's choice (the
	// CPU count or the container's limit) under background load. It
	// deliberately ignores a container's CPU limit: a sidecar should not
	// take as many cores as the server it fronts (Linkerd's proxy also
	// defaults to one); --procs 0 restores Go's choice.
	defaultProcs = 1
	// defaultShutdownGrace: on SIGTERM, how long running calls may finish.
	defaultShutdownGrace = 30 * time.Second
)

// retriesWarning is logged when the policy asks for re-runs.
const retriesWarning = "policy: idempotent/maxRetries are set, but this version never re-runs a call lost with a crashed replica; such tasks fail (see README, Leases)"

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the parsed flags.
type options struct {
	listen, upstream, redisURL, configPath, adminListen string
	adminTokenFile                                      string
	upstreamCA                                          string
	logLevel, logFormat                                 string
	ownerKey, allowedOrigins                            string
	rewriteHost, directIO, schedBatch                   bool
	maxBodySize, maxResultSize                          int
	maxTasksPerOwner, listPageSize, queueMax, taskBurst int
	procs                                               int
	procsGiven                                          bool // --procs or TASKGATE_PROCS was set
	taskRate                                            float64
	streamIdle, streamLifetime, upstreamIdleConn        time.Duration
	keepAlive, lease, shutdownGrace, storeTimeout       time.Duration
	promoteWindow                                       time.Duration
	// stdio upstream (--upstream-command)
	upstreamCommand, upstreamDir           string
	upstreamEnv                            []string
	upstreamEnvBad                         int // 1-based index of the first malformed --upstream-env entry
	stdioMaxChildren, stdioMaxLine         int
	stdioIdle, stdioInitTimeout, stdioStop time.Duration
	stdioShared                            bool
	deployOptions
}

func versionString() string {
	v := version
	if v == "" {
		v = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return "taskgate " + v
}

// newFlagSet defines the flags; each gets an environment variable.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("taskgate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and --help itself
	fs.Usage = func() {}
	fs.StringVar(&o.listen, "listen", defaultListen, "address the proxy listens on")
	fs.StringVar(&o.upstream, "upstream", "", "URL of the upstream MCP endpoint, e.g. http://127.0.0.1:3000/mcp (this or --upstream-command is required)")
	fs.StringVar(&o.upstreamCommand, "upstream-command", "", "run a stdio MCP server instead of an HTTP --upstream: program and arguments, split like a shell without expansion, e.g. 'npx -y @modelcontextprotocol/server-memory'; one process per client session")
	fs.Func("upstream-env", "NAME=VALUE added to the --upstream-command environment (which is taskgate's own); repeatable, or newline-separated in the variable; values are never logged", func(v string) error {
		for _, kv := range strings.Split(v, "\n") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			// A malformed entry is reported by validate, not here: the
			// flag package would echo the value, which may be a secret.
			if name, _, ok := strings.Cut(kv, "="); (!ok || name == "") && o.upstreamEnvBad == 0 {
				o.upstreamEnvBad = len(o.upstreamEnv) + 1
			}
			o.upstreamEnv = append(o.upstreamEnv, kv)
		}
		return nil
	})
	fs.StringVar(&o.upstreamDir, "upstream-dir", "", "working directory of the --upstream-command processes; empty = taskgate's")
	fs.IntVar(&o.stdioMaxChildren, "stdio-max-children", stdio.DefaultMaxChildren, "maximum --upstream-command processes at once (one per client session); initialize gets HTTP 503 above it")
	durationVar(fs, &o.stdioIdle, "stdio-idle-timeout", stdio.DefaultIdleTimeout, "stop a session's --upstream-command process after this long without a call in flight, an open GET stream or traffic")
	durationVar(fs, &o.stdioInitTimeout, "stdio-init-timeout", stdio.DefaultInitTimeout, "kill an --upstream-command process that has not answered initialize this long after it started")
	sizeVar(fs, &o.stdioMaxLine, "stdio-max-line", stdio.DefaultMaxLineSize, "maximum size of one message (line) from an --upstream-command process; longer lines are dropped and the call they answer fails")
	durationVar(fs, &o.stdioStop, "stdio-stop-grace", stdio.DefaultStopGrace, "stopping an --upstream-command process: its stdin is closed, then after this SIGTERM, then after this again SIGKILL (whole process group)")
	fs.BoolVar(&o.stdioShared, "stdio-shared", false, "one --upstream-command process for all client sessions (stateless servers only): taskgate rewrites request ids and progress tokens so answers never cross sessions; requests and notifications the server sends on its own reach no session")
	fs.StringVar(&o.upstreamCA, "upstream-ca", "", "PEM file of the CA certificates trusted for an https --upstream, instead of the system's")
	fs.StringVar(&o.redisURL, "redis", "", "task store: redis://, rediss://, redis+cluster:// or redis+sentinel:// URL; empty = embedded in-process store (single process only)")
	fs.StringVar(&o.configPath, "config", "", "policy file (YAML); empty = defaults (every tool optional)")
	fs.StringVar(&o.adminListen, "admin-listen", defaultAdminListen, "address of /healthz, /readyz, /readyz/store and /metrics; empty disables")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the bearer token of the admin task API, the `taskgate tasks` CLI and the dashboard (/admin/ on --admin-listen); re-read when it changes (a Secret's symlink swap included); empty = they are off (404)")
	fs.StringVar(&o.logLevel, "log-level", defaultLogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", defaultLogFormat, "log format: json or console")
	fs.StringVar(&o.ownerKey, "owner-key", "", "secret (>= 16 bytes) keying task owners and list cursors; empty = with --redis, a key created once in Redis and shared by every taskgate on it; without --redis, random per process")
	fs.StringVar(&o.allowedOrigins, "allowed-origins", "", "comma-separated Origin allow-list (403 otherwise); empty = not checked by taskgate")
	fs.BoolVar(&o.rewriteHost, "rewrite-host", false, "send the upstream's host as Host instead of the client's (needed when the upstream checks Host against DNS rebinding, as the official Go SDK does on loopback; taskgate then checks Origin itself if --allowed-origins is set)")
	fs.IntVar(&o.procs, "procs", defaultProcs, "CPUs that run taskgate's Go code at once (GOMAXPROCS); 1 (the default, whatever the container's CPU limit) costs the least CPU per request beside an upstream and kept the rate of Go's choice on a loaded machine; 0 = Go's choice (the GOMAXPROCS variable, else CPU count or container limit)")
	fs.BoolVar(&o.schedBatch, "sched-batch", false, "opt-in: run taskgate's threads under Linux's batch scheduling policy: woken by the upstream's answer, taskgate does not preempt the upstream but waits for it to block. Trade-off measured on a loaded 2-core machine: with 16 clients 1.26x the rate and less CPU per request, but with one client 0.80x the rate and p99 +0.66 ms, since every other process on the node then runs first; --upstream-command children run under the normal policy")
	fs.BoolVar(&o.directIO, "direct-io", true, "read and write client and upstream TCP sockets with direct system calls: about half of taskgate's CPU per request on a loaded machine (109 against 198 µs with one client) at the same rate; false = Go's net.Conn")
	sizeVar(fs, &o.maxBodySize, "max-body-size", proxy.DefaultMaxBodySize, "maximum request body: bytes, or a number with a unit (512KiB, 4MiB) (413 above)")
	sizeVar(fs, &o.maxResultSize, "max-result-size", proxy.DefaultMaxResultSize, "maximum upstream result of a task: bytes, or a number with a unit (512KiB, 4MiB) (the task fails above)")
	fs.IntVar(&o.maxTasksPerOwner, "max-tasks-per-owner", proxy.DefaultMaxTasksPerOwner, "maximum unfinished tasks per owner; -1 = unlimited")
	fs.IntVar(&o.listPageSize, "list-page-size", proxy.DefaultListPageSize, "tasks/list page size")
	fs.Float64Var(&o.taskRate, "task-rate", proxy.DefaultTaskRate, "task operations (task calls and tasks/*) per second per owner and process; unknown-task lookups count 5; -1 disables")
	fs.IntVar(&o.taskBurst, "task-burst", proxy.DefaultTaskBurst, "burst size of --task-rate")
	fs.IntVar(&o.queueMax, "queue-max", proxy.DefaultQueueMax, "undelivered messages kept per task (progress/log dropped oldest-first above; requests never)")
	durationVar(fs, &o.streamIdle, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "cut an upstream answer that sends nothing for this long")
	durationVar(fs, &o.streamLifetime, "stream-max-lifetime", proxy.DefaultStreamMaxLifetime, "maximum lifetime of one proxied SSE stream")
	durationVar(fs, &o.upstreamIdleConn, "upstream-idle-conn", proxy.DefaultUpstreamIdleConn, "close idle upstream keep-alive connections after this (keep below the upstream's idle limit)")
	durationVar(fs, &o.promoteWindow, "promote-window", proxy.DefaultPromoteWindow,
		"MCP 2026-07-28 clients: how long a task-eligible tools/call runs before it becomes a task (sooner: a plain result, or an InputRequiredResult when the upstream asks)")
	durationVar(fs, &o.keepAlive, "keepalive", proxy.DefaultKeepAlive, "interval of SSE keep-alive comments on tasks/result waits")
	durationVar(fs, &o.lease, "lease", proxy.DefaultLease, "task lease: a task whose runner died is failed by another replica within this (renewed every lease/5)")
	durationVar(fs, &o.shutdownGrace, "shutdown-grace", defaultShutdownGrace, "on SIGTERM, how long running task calls may finish before they are cancelled and failed")
	durationVar(fs, &o.storeTimeout, "store-timeout", proxy.DefaultStoreTimeout, "bound on each task store operation")
	deployFlags(fs, &o.deployOptions)
	return fs
}

func envName(flagName string) string {
	return "TASKGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseArgs parses flags, letting TASKGATE_* variables fill flags not given
// on the command line.
func parseArgs(args []string, stdout io.Writer, getenv func(string) string) (*options, error) {
	o := &options{}
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return nil, err
		}
		return nil, withFlagHint(fs, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErr = envValueError(f, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	o.procsGiven = set["procs"] || getenv(envName("procs")) != ""
	return o, o.validate()
}

// procsFor returns the GOMAXPROCS that --procs asks for, or 0 to keep
// Go's choice. Without --procs or TASKGATE_PROCS, a GOMAXPROCS environment
// variable wins over the default of 1.
func procsFor(o *options, getenv func(string) string) int {
	if !o.procsGiven && getenv("GOMAXPROCS") != "" {
		return 0
	}
	return o.procs
}

func (o *options) validate() error {
	switch {
	case o.upstream == "" && o.upstreamCommand == "":
		return errors.New("--upstream is required (e.g. --upstream http://127.0.0.1:3000/mcp), or --upstream-command for a stdio server")
	case o.upstream != "" && o.upstreamCommand != "":
		return errors.New("--upstream and --upstream-command exclude each other: give an HTTP upstream or a stdio command")
	}
	if o.upstream != "" {
		if _, err := checkUpstream(o.upstream); err != nil {
			return err
		}
	}
	if err := checkListen("--listen", o.listen); err != nil {
		return err
	}
	if o.adminListen != "" {
		if err := checkListen("--admin-listen", o.adminListen); err != nil {
			return err
		}
	}
	if o.adminTokenFile != "" && o.adminListen == "" {
		return errors.New("--admin-token-file needs --admin-listen: the admin API is served there")
	}
	if o.redisURL != "" {
		if err := checkRedisURL(o.redisURL); err != nil {
			return err
		}
	}
	switch {
	case o.upstreamCommand == "" && (len(o.upstreamEnv) > 0 || o.upstreamDir != "" || o.stdioShared):
		return errors.New("--upstream-env, --upstream-dir and --stdio-shared need --upstream-command")
	case o.upstreamCommand != "" && o.upstreamCA != "":
		return errors.New("--upstream-ca: a stdio --upstream-command has no TLS")
	case o.upstreamEnvBad > 0:
		return fmt.Errorf("--upstream-env: entry %d is not NAME=VALUE (its text is not shown: it may be a secret)", o.upstreamEnvBad)
	case o.stdioMaxChildren <= 0:
		return errors.New("--stdio-max-children: must be positive")
	case o.stdioMaxLine <= 0:
		return errors.New("--stdio-max-line: must be positive")
	case o.upstreamCA != "" && !strings.HasPrefix(strings.ToLower(o.upstream), "https://"):
		return errors.New("--upstream-ca: the --upstream is not https")
	case o.logFormat != "json" && o.logFormat != "console":
		return fmt.Errorf("--log-format: %q is not json or console", o.logFormat)
	case o.ownerKey != "" && len(o.ownerKey) < 16:
		return errors.New("--owner-key: must be at least 16 bytes")
	case o.maxBodySize <= 0:
		return errors.New("--max-body-size: must be positive")
	case o.maxResultSize <= 0:
		return errors.New("--max-result-size: must be positive")
	case o.taskRate == 0 || o.taskRate < -1:
		return errors.New("--task-rate: must be positive, or -1 to disable")
	case o.taskBurst <= 0:
		return errors.New("--task-burst: must be positive")
	case o.procs < 0:
		return errors.New("--procs: must be 0 (Go's choice) or positive")
	case o.queueMax <= 0:
		return errors.New("--queue-max: must be positive")
	case o.listPageSize <= 0 || o.listPageSize > 1000:
		return errors.New("--list-page-size: must be between 1 and 1000")
	case o.maxTasksPerOwner == 0 || o.maxTasksPerOwner < -1:
		return errors.New("--max-tasks-per-owner: must be positive, or -1 for unlimited")
	}
	for name, d := range map[string]time.Duration{
		"--stream-idle-timeout": o.streamIdle, "--stream-max-lifetime": o.streamLifetime,
		"--upstream-idle-conn": o.upstreamIdleConn, "--keepalive": o.keepAlive, "--lease": o.lease,
		"--store-timeout":      o.storeTimeout,
		"--stdio-idle-timeout": o.stdioIdle, "--stdio-init-timeout": o.stdioInitTimeout, "--stdio-stop-grace": o.stdioStop,
		"--promote-window": o.promoteWindow,
	} {
		if d <= 0 {
			return fmt.Errorf("%s: must be positive", name)
		}
	}
	if o.shutdownGrace < 0 {
		return errors.New("--shutdown-grace: must not be negative")
	}
	if err := o.deployOptions.validate(); err != nil {
		return err
	}
	if o.upstreamCommand != "" {
		if _, err := stdio.SplitCommand(o.upstreamCommand); err != nil {
			return fmt.Errorf("--upstream-command: %w", err)
		}
	}
	if _, err := zerolog.ParseLevel(o.logLevel); err != nil || o.logLevel == "" {
		return fmt.Errorf("--log-level: %q is not debug, info, warn or error", o.logLevel)
	}
	return nil
}

// upstreamTLS returns the TLS settings for --upstream-ca (nil: the
// defaults, the system's roots).
func upstreamTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in the file", caFile)
	}
	return &tls.Config{RootCAs: pool}, nil
}

// logTimeFormat is the log lines' "time": RFC 3339 with milliseconds
// (zerolog's default has whole seconds, too coarse to order the lines of
// one request or to match them with traces).
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// newLogger returns the process logger writing to w. Console output is
// coloured only when isTTY (and NO_COLOR is unset). It sets zerolog's
// process-wide time format to logTimeFormat.
func newLogger(o *options, w io.Writer, isTTY bool) zerolog.Logger {
	zerolog.TimeFieldFormat = logTimeFormat
	lvl, _ := zerolog.ParseLevel(o.logLevel)
	if o.logFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: logTimeFormat, NoColor: !isTTY || os.Getenv("NO_COLOR") != ""}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// redisLogger routes go-redis's own messages (reconnect failures and the
// like) into the structured log.
type redisLogger struct{ l zerolog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, args ...any) {
	r.l.Warn().Str("component", "go-redis").Msg(fmt.Sprintf(format, args...))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version", "--version", "-version":
			fmt.Fprintln(stdout, versionString())
			return 0
		case "healthcheck":
			return healthcheck(args[1:], stdout, stderr, os.Getenv)
		case "tasks":
			return tasksCommand(args[1:], stdout, stderr, os.Getenv)
		case "reload":
			return reloadCommand(args[1:], stdout, stderr, os.Getenv)
		}
	}
	o, err := parseArgs(args, stdout, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "taskgate: %v\n(taskgate --help lists the flags)\n", err)
		return 2
	}
	g := &gateway{o: o}
	// From here on everything for stderr goes through g.lw, in order.
	g.setupProcess(stderr)
	defer g.lw.Close()
	g.warnUnknownEnv(os.Environ())
	// SIGHUP is caught from the start: its default action would end the
	// process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	defer g.teardown()
	// The listeners are bound before the store is opened: a start that
	// fails on a port in use has written nothing to the store and started
	// nothing that would log about it.
	for _, step := range []func() error{
		g.loadConfig,
		g.bindListeners,
		g.openStore,
		g.newHandler,
		g.startBackground,
		g.startServers,
	} {
		if err := step(); err != nil {
			return g.startFailed(err)
		}
	}
	code := g.wait(hup)
	g.shutdown()
	return code
}

// gateway is one running taskgate: run sets it up step by step, serves,
// shuts it down and tears it down. Each step fills the fields the next ones
// use and registers what teardown must undo.
type gateway struct {
	o   *options
	lw  *logWriter
	log zerolog.Logger
	reg *prometheus.Registry

	pol      *policy.Policy
	upTLS    *tls.Config
	st       *openedStore
	children *stdio.Server
	h        *proxy.Handler
	upName   string // the upstream as logged: its URL, or "stdio"
	reloader *policyReloader
	api      *admin.Server // nil without --admin-token-file
	watch    fileWatcher
	tls      *serverTLS // nil without --tls-cert

	bgCtx  context.Context
	stopBG context.CancelFunc

	ln, aln  net.Listener
	srv      *fasthttp.Server
	admin    *http.Server
	serveErr chan error
	draining drainState
	sig      chan os.Signal // SIGTERM and SIGINT, from wait on

	// undo is run by teardown in reverse order.
	undo []func()
}

// startError is a failed start-up step: the one line printed and the exit
// status (2 a bad flag or file, 1 a failure of the environment).
type startError struct {
	code int
	err  error
}

func (e *startError) Error() string { return e.err.Error() }

func startErr(code int, err error) error { return &startError{code: code, err: err} }

// startFailed prints the cause of a failed start and returns the exit
// status.
func (g *gateway) startFailed(err error) int {
	fmt.Fprintf(g.lw, "taskgate: %v\n", err)
	var se *startError
	if errors.As(err, &se) {
		return se.code
	}
	return 1
}

// teardown undoes the steps that ran, last first.
func (g *gateway) teardown() {
	for i := len(g.undo) - 1; i >= 0; i-- {
		g.undo[i]()
	}
}

// setupProcess sets up logging, GOMAXPROCS and the scheduling policy.
func (g *gateway) setupProcess(stderr io.Writer) {
	o := g.o
	g.lw = newLogWriter(stderr, 8192)
	g.lw.console = o.logFormat == "console"
	g.log = newLogger(o, g.lw, isTerminal(stderr))
	// go-redis repeats its complaints on every dial while Redis is down;
	// the store probe reports the outage itself, so a few lines a minute
	// are enough.
	redis.SetLogger(redisLogger{g.log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute})})
	if n := procsFor(o, os.Getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	if o.schedBatch && sched.Supported() {
		if _, err := sched.SetBatch(); err != nil {
			g.log.Warn().Err(err).Msg("running under the normal scheduling policy")
		}
	}
	g.reg = prometheus.NewRegistry()
	// go_gc_heap_live_bytes (the heap the last collection found live) besides
	// the go_memstats_* set: what a leak shows in, unlike allocated bytes.
	g.reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskgate_log_lines_dropped_total",
		Help: "Log lines dropped because the log output could not keep up (the next line written says how many)."},
		func() float64 { return float64(g.lw.Dropped()) }))
}

// warnUnknownEnv logs each TASKGATE_ variable of environ that names no flag
// (a typo would otherwise leave its flag at the default unnoticed).
func (g *gateway) warnUnknownEnv(environ []string) {
	for _, u := range unknownEnv(newFlagSet(&options{}), environ) {
		e := g.log.Warn().Str("variable", u[0])
		if u[1] != "" {
			e = e.Str("did_you_mean", u[1])
		}
		e.Msg("unknown TASKGATE_ variable ignored: it names no flag")
	}
}

// loadConfig reads the files the flags name: the policy and --upstream-ca.
func (g *gateway) loadConfig() error {
	o := g.o
	g.watch.log = g.log
	g.pol = policy.Default()
	if o.configPath != "" {
		g.watch.add(func() { _ = g.reloader.Reload("file changed") }, o.configPath)
		p, err := policy.Load(o.configPath)
		if err != nil {
			return startErr(2, err)
		}
		g.pol = p
	}
	upTLS, err := upstreamTLS(o.upstreamCA)
	if err != nil {
		return startErr(2, err)
	}
	g.upTLS = upTLS
	if o.tlsCert != "" {
		g.watch.add(func() { g.tls.reload() }, o.tlsCert, o.tlsKey, o.tlsClientCA)
		if g.tls, err = newServerTLS(&o.deployOptions, g.log); err != nil {
			return startErr(2, err)
		}
	}
	if g.pol.RetriesRequested() {
		g.log.Warn().Msg(retriesWarning)
	}
	if warn, _ := checkUpstream(o.upstream); warn != "" {
		g.log.Warn().Msg(warn)
	}
	return nil
}

// openStore connects the task store.
func (g *gateway) openStore() error {
	st, err := openStore(g.o, g.log)
	if err != nil {
		return startErr(1, err)
	}
	g.st = st
	g.undo = append(g.undo, st.close)
	return nil
}

// newHandler starts the stdio upstream, if any, and builds the proxy.
func (g *gateway) newHandler() error {
	o := g.o
	upstream := o.upstream
	g.upName = o.upstream
	var dial func(context.Context) (net.Conn, error)
	if o.upstreamCommand != "" {
		children, err := newStdio(o, g.log, g.reg)
		if err != nil {
			return startErr(2, err)
		}
		g.children = children
		g.undo = append(g.undo, func() {
			// Children are stopped last: the handler's Close sends
			// cancellations of running calls through them.
			ctx, cancel := context.WithTimeout(context.Background(), 3*o.stdioStop+5*time.Second)
			defer cancel()
			_ = children.Close(ctx)
		})
		upstream, g.upName, dial = stdio.UpstreamURL, "stdio", children.Dial
	}
	tracer, stopTracing, err := setupTracing(g.log)
	if err != nil {
		return startErr(2, err)
	}
	// Undone after the handler's Close (undo runs in reverse): the calls'
	// spans end there.
	g.undo = append(g.undo, stopTracing)
	h, err := proxy.New(proxy.Config{
		Upstream:          upstream,
		Dial:              dial,
		RewriteHost:       o.rewriteHost,
		MaxBodySize:       o.maxBodySize,
		MaxResultSize:     o.maxResultSize,
		StreamIdleTimeout: o.streamIdle,
		StreamMaxLifetime: o.streamLifetime,
		UpstreamIdleConn:  o.upstreamIdleConn,
		OwnerKey:          []byte(o.ownerKey),
		ListPageSize:      o.listPageSize,
		KeepAlive:         o.keepAlive,
		PromoteWindow:     o.promoteWindow,
		Lease:             o.lease,
		MaxTasksPerOwner:  o.maxTasksPerOwner,
		AllowedOrigins:    splitList(o.allowedOrigins),
		StoreTimeout:      o.storeTimeout,
		QueueMax:          o.queueMax,
		TaskRate:          o.taskRate,
		TaskBurst:         o.taskBurst,
		NetIO:             !o.directIO,
		UpstreamTLS:       g.upTLS,
		Tracer:            tracer,
	}, g.pol, g.st.store, g.log, newMetrics(g.reg))
	if err != nil {
		return startErr(2, err)
	}
	g.h = h
	if g.children != nil {
		g.children.SetSessionLabel(h.SessionLabel)
	}
	return nil
}

// startBackground starts what runs beside the servers: the shared owner
// key's loader, the store probe and the policy reloader.
func (g *gateway) startBackground() error {
	g.bgCtx, g.stopBG = context.WithCancel(context.Background())
	g.undo = append(g.undo, g.stopBG)
	if g.st.key != nil {
		// With Redis up, the key is known before the first request; else
		// it is loaded in the background and task operations wait for it.
		// Then the loop keeps this replica on the key Redis holds.
		g.st.key.register(g.reg)
		g.st.key.interval = g.o.lease / 4
		_ = g.st.key.load(g.bgCtx, g.h)
		go g.st.key.loop(g.bgCtx, g.h)
	}
	probe := newStoreProbe(g.reg, g.st.store, g.st.rdb, g.o.storeTimeout, g.log)
	_ = probe.check(g.bgCtx)
	go probe.loop(g.bgCtx, 5*time.Second)
	g.reloader = newPolicyReloader(g.reg, g.o.configPath, g.h, g.log)
	api, err := newAdminAPI(g.o, g.st, g.h, g.reloader, g.reg, g.log)
	if err != nil {
		return startErr(2, err)
	}
	g.api = api
	go g.watch.run(g.bgCtx)
	return nil
}

// bindListeners binds the proxy's and the admin server's addresses.
func (g *gateway) bindListeners() error {
	o := g.o
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return startErr(listenExit(err), fmt.Errorf("--listen %s: %w", o.listen, err))
	}
	if o.directIO {
		ln = sysconn.Listener{Listener: ln}
	}
	if g.tls != nil {
		ln = tls.NewListener(ln, g.tls.config(false))
	}
	g.ln = ln
	g.undo = append(g.undo, func() { _ = ln.Close() })
	if o.adminListen != "" {
		aln, err := net.Listen("tcp", o.adminListen)
		if err != nil {
			return startErr(listenExit(err), fmt.Errorf("--admin-listen %s: %w", o.adminListen, err))
		}
		if g.tls != nil {
			aln = tls.NewListener(aln, g.tls.config(true))
		}
		g.aln = aln
		g.undo = append(g.undo, func() { _ = aln.Close() })
	}
	return nil
}

// startServers serves the proxy and the admin server on their listeners.
func (g *gateway) startServers() error {
	o := g.o
	g.srv = &fasthttp.Server{
		Handler:               g.draining.proxy(g.h.ServeFastHTTP),
		ErrorHandler:          g.h.ErrorHandler,
		Name:                  "",
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    o.maxBodySize,
		ReadTimeout:           time.Minute, // reading one request; never the response (a write timeout would cut long SSE answers)
		IdleTimeout:           2 * time.Minute,
		CloseOnShutdown:       true,
		Logger:                proxy.ServerLogger(g.log),
		// fasthttp's errors about malformed requests then carry no request
		// bytes; the handler logs only their kind (ErrorHandler).
		SecureErrorLogMessage: true,
	}
	if g.aln != nil {
		g.admin = &http.Server{Handler: g.draining.readyz(adminMux(g.reg, g.st.store, g.h, g.api)), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = g.admin.Serve(g.aln) }()
	}
	g.serveErr = make(chan error, 1)
	go func() { g.serveErr <- g.srv.Serve(g.ln) }()
	g.log.Info().Str("listen", g.ln.Addr().String()).Str("upstream", g.upName).
		Str("store", storeName(o)).Str("version", versionString()).
		Int("procs", runtime.GOMAXPROCS(0)).Bool("sched_batch", sched.Active()).Bool("tls", g.tls != nil).Msg("taskgate listening")
	return nil
}

// wait serves until SIGTERM or SIGINT, or until the proxy's server fails,
// reloading the policy on SIGHUP. It returns the exit status.
func (g *gateway) wait(hup <-chan os.Signal) int {
	g.sig = make(chan os.Signal, 1)
	signal.Notify(g.sig, syscall.SIGINT, syscall.SIGTERM)
	g.undo = append(g.undo, func() { signal.Stop(g.sig) })
	for {
		select {
		case <-hup:
			_ = g.reloader.Reload("SIGHUP")
		case s := <-g.sig:
			g.log.Info().Str("signal", s.String()).Stringer("drain_delay", g.o.drainDelay).
				Stringer("grace", g.o.shutdownGrace).Msg("shutting down")
			g.drain(g.sig)
			return 0
		case err := <-g.serveErr:
			g.log.Error().Err(err).Msg("server stopped")
			return 1
		}
	}
}

// shutdown stops accepting and lets in-flight requests and background
// calls finish within the grace period; calls still running then are
// cancelled upstream and their tasks failed with a clear message.
func (g *gateway) shutdown() {
	g.draining.on.Store(true)
	g.log.Info().Stringer("grace", g.o.shutdownGrace).Msg("no longer accepting connections; waiting for running calls")
	ctx, cancel := context.WithTimeout(context.Background(), g.o.shutdownGrace)
	defer cancel()
	done := make(chan struct{})
	go func() {
		_ = g.srv.ShutdownWithContext(ctx)
		close(done)
	}()
	_ = g.h.Close(ctx)
	<-done
	// h.Close returned once the result streams wrote their final answers;
	// let the server finish those responses before the process exits.
	fin, cancelFin := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelFin()
	_ = g.srv.ShutdownWithContext(fin)
	if g.admin != nil {
		_ = g.admin.Close()
	}
	g.stopBG()
	g.log.Info().Msg("stopped")
}

// newMetrics creates the proxy's collectors on reg, with the version set
// at build time (-ldflags "-X main.version=...") in taskgate_build_info.
func newMetrics(reg prometheus.Registerer) *proxy.Metrics {
	m := proxy.NewMetrics(reg)
	m.SetBuildVersion(strings.TrimPrefix(versionString(), "taskgate "))
	return m
}

// newStdio sets up the stdio upstream of --upstream-command. Only the
// program and the names of --upstream-env entries are logged: arguments
// and values may hold secrets.
func newStdio(o *options, log zerolog.Logger, reg prometheus.Registerer) (*stdio.Server, error) {
	argv, err := stdio.SplitCommand(o.upstreamCommand)
	if err != nil {
		return nil, fmt.Errorf("--upstream-command: %w", err)
	}
	s, err := stdio.New(stdio.Config{
		Command:     argv,
		Env:         o.upstreamEnv,
		Dir:         o.upstreamDir,
		MaxChildren: o.stdioMaxChildren,
		IdleTimeout: o.stdioIdle,
		InitTimeout: o.stdioInitTimeout,
		MaxLineSize: o.stdioMaxLine,
		StopGrace:   o.stdioStop,
		QueueMax:    o.queueMax,
		Metrics:     reg,
		Shared:      o.stdioShared,
	}, log)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(o.upstreamEnv))
	for _, kv := range o.upstreamEnv {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	log.Info().Str("program", argv[0]).Int("args", len(argv)-1).Strs("env_names", names).
		Int("max_children", o.stdioMaxChildren).Bool("shared", o.stdioShared).Msg("stdio upstream started")
	return s, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func storeName(o *options) string {
	if o.redisURL == "" {
		return "embedded"
	}
	return "redis"
}

// openedStore is the task store openStore connected.
type openedStore struct {
	store taskstore.Store
	admin taskstore.Admin       // the store's operator view; nil when it has none
	rdb   redis.UniversalClient // nil for the embedded store
	key   *sharedKey            // non-nil: the owner key is to be read from Redis
	close func()
}

// openStore connects the task store: Redis when --redis is set (it need not
// be up yet: taskgate starts, passes traffic through and reports the store
// down), else the embedded one. With --redis and no --owner-key, task
// operations are held back by a keyGate until the shared key is loaded.
func openStore(o *options, log zerolog.Logger) (*openedStore, error) {
	cfg := taskstore.Config{CursorKey: []byte(o.ownerKey), OpTimeout: o.storeTimeout,
		SessionTaskDelay: taskstore.DefaultSessionTaskDelay}
	if len(cfg.CursorKey) == 0 {
		cfg.CursorKey = nil
	}
	if o.redisURL == "" {
		s, closer, err := taskstore.NewEmbedded(cfg)
		if err != nil {
			return nil, fmt.Errorf("embedded store: %w", err)
		}
		log.Warn().Msg("using the embedded task store: tasks live in this process only and are lost when it exits; " +
			"set --redis to share tasks between replicas and keep them across restarts")
		return &openedStore{store: s, admin: s, close: closer}, nil
	}
	rdb, err := taskstore.Open(o.redisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if cfg.WaitReplicas, cfg.WaitTimeout, err = taskstore.ReplicaWait(o.redisURL); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if cfg.Sentinels, err = taskstore.SentinelOptions(o.redisURL); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	s, err := taskstore.NewRedis(rdb, cfg)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	out := &openedStore{store: s, rdb: rdb, close: func() { _ = s.Close(); _ = rdb.Close() }}
	out.admin, _ = any(s).(taskstore.Admin)
	if o.ownerKey == "" {
		gate := &keyGate{Store: s}
		out.store = gate
		out.key = &sharedKey{rdb: rdb, store: s, gate: gate, timeout: o.storeTimeout, log: log}
	}
	return out, nil
}

// adminMux serves /healthz (alive), /readyz (the upstream accepts
// connections: pass-through works, whatever the store's state),
// /readyz/store (the task store answers), /metrics, and under /admin the
// admin task API and dashboard (404 unless --admin-token-file is set).
func adminMux(reg *prometheus.Registry, store taskstore.Store, h *proxy.Handler, api *admin.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/admin", api)
	mux.Handle("/admin/", api)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	check := func(what string, ping func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ping(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, what+": "+err.Error()+"\n")
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		}
	}
	mux.HandleFunc("/readyz", check("upstream", h.PingUpstream))
	mux.HandleFunc("/readyz/store", check("store", store.Ping))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
