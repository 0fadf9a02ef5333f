package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/proxy/stdio"
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
	pollHold                                            time.Duration
	// stdio upstream (--upstream-command)
	upstreamCommand, upstreamDir           string
	upstreamEnv                            []string
	upstreamEnvBad                         int // 1-based index of the first malformed --upstream-env entry
	stdioMaxChildren, stdioMaxLine         int
	stdioIdle, stdioInitTimeout, stdioStop time.Duration
	stdioShared                            bool
	deployOptions
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
	durationVar(fs, &o.pollHold, "poll-hold", proxy.DefaultPollHold,
		"on the replica that runs the call, hold a tasks/get of a working task until it ends or asks for input, for at most twice its delay bound (max(100ms, 5% of its age)) and this long, and report a pollInterval shorter than that bound by the round trips: clients that follow pollInterval learn of the end within the bound with about half the polls; 0 = answer at once")
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
	if o.pollHold < 0 {
		return errors.New("--poll-hold: must not be negative (0 = off)")
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
