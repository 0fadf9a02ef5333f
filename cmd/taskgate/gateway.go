package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/proxy/admin"
	"github.com/taskgate/taskgate/proxy/sched"
	"github.com/taskgate/taskgate/proxy/stdio"
	"github.com/taskgate/taskgate/proxy/sysconn"
)

// retriesWarning is logged when the policy asks for re-runs.
const retriesWarning = "policy: idempotent/maxRetries are set, but this version never re-runs a call lost with a crashed replica; such tasks fail (see README, Leases)"

// gateway is one running taskgate: serve sets it up step by step, serves,
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

// start runs the start-up steps in order, stopping at the first that
// fails. The listeners are bound before the store is opened: a start that
// fails on a port in use has written nothing to the store and started
// nothing that would log about it.
func (g *gateway) start() error {
	for _, step := range []func() error{
		g.loadConfig,
		g.bindListeners,
		g.openStore,
		g.newHandler,
		g.startBackground,
		g.startServers,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
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
		PollHold:          pollHold(o.pollHold),
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

// newMetrics creates the proxy's collectors on reg, with the version set
// at build time (-ldflags "-X main.version=...") in taskgate_build_info.
func newMetrics(reg prometheus.Registerer) *proxy.Metrics {
	m := proxy.NewMetrics(reg)
	m.SetBuildVersion(strings.TrimPrefix(versionString(), "taskgate "))
	return m
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

// pollHold maps --poll-hold to proxy.Config.PollHold: 0 (off) is negative
// there, where 0 means the default.
func pollHold(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
