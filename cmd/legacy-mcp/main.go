// Command legacy-mcp is a demo MCP server without tasks support, built on the
// official Go SDK and served over Streamable HTTP. It is what the README
// quickstart puts behind taskgate and what the e2e tests use as a real
// upstream.
//
// It is a development tool, not part of taskgate: it is not in the image and
// its tools and flags may change with the tests that use them.
//
// Tools: echo, slow (progress, log notifications, cancellation), fail
// (isError result), rpc_error (JSON-RPC error), large (big result with its
// sha256), ask (elicitation) and stats (counters tests read to see that a
// cancel reached the server).
//
// Usage:
//
//	legacy-mcp [--listen 127.0.0.1:3000] [--path /mcp] [--stateless] [--json]
//	           [--max-protocol-version 2025-11-25] [--log-level info] [--fixtures] [--everything] [--diagnostics]
//	legacy-mcp --stdio [--max-protocol-version 2025-11-25] [--log-level info]
//
// --fixtures adds the tools the official conformance suite's tasks scenarios
// call (greet, slow_compute, failing_job, protocol_error_job, confirm_delete,
// multi_input, test_tool_with_task; see fixtures.go). With
// --max-protocol-version 2026-07-28 --stateless it is an upstream of the MCP
// 2026-07-28 era (the SDK serves that era only on stateless servers).
// --everything adds what the conformance suite's 2025-era server scenarios
// call (test_* tools, resources, prompts, completions, subscriptions; see
// everything.go). --diagnostics adds what the suite's 2026-07-28
// server-stateless scenario calls (test_missing_capability,
// test_streaming_elicitation, test_logging_tool, test_trigger_tool_change;
// see diagnostics.go). --trace-tool adds traceparent, which returns the
// traceparent header its call arrived with (tracing.go).
//
// It prints "listening on http://ADDR/PATH" to stderr once it accepts
// connections, and shuts down gracefully on SIGINT or SIGTERM. With
// --stdio it serves one client on stdin and stdout instead (newline-
// delimited JSON-RPC, the SDK's StdioTransport), logs to stderr, and exits
// when stdin closes: the stdio server taskgate's --upstream-command tests run.
//
// Logging uses log/slog rather than zerolog: the SDK takes a *slog.Logger for
// its own logs, so one handler serves both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// config is the parsed command line.
type config struct {
	listen             string        // address to listen on
	path               string        // URL path of the MCP endpoint
	stdio              bool          // serve one client on stdin/stdout instead of HTTP
	stateless          bool          // no sessions: each POST is its own session
	jsonResponse       bool          // answer POSTs with application/json instead of SSE
	maxProtocolVersion string        // newest protocol version negotiated or accepted
	logLevel           slog.Level    // minimum level logged to stderr
	anyHost            bool          // accept any Host header on loopback (no DNS rebinding protection)
	shutdownTimeout    time.Duration // how long running requests may take to finish at shutdown
	fixtures           bool          // add the conformance fixture tools
	everything         bool          // add what the 2025-era conformance server scenarios call
	diagnostics        bool          // add what the 2026-era server-stateless scenario calls
	traceTool          bool          // add the traceparent tool
}

// usageNote heads --help: what the program is, and that it is a
// development tool.
const usageNote = "a demo MCP server on the official Go SDK, without tasks (the upstream of taskgate's quickstart and e2e tests).\n" +
	"A development tool of taskgate, not part of the product."

// defaultMaxProtocolVersion is the newest protocol version served by default:
// the one whose tasks taskgate adds. The SDK also speaks 2026-07-28.
const defaultMaxProtocolVersion = "2025-11-25"

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "legacy-mcp:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.stdio {
		if err := runStdio(ctx, cfg, log); err != nil {
			log.Error("exiting", "err", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, cfg, log, os.Stderr); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// parseFlags parses and validates the command line.
func parseFlags(args []string, out io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("legacy-mcp", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "legacy-mcp: %s\n\nUsage of legacy-mcp:\n", usageNote)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:3000", "address to listen on")
	fs.StringVar(&cfg.path, "path", "/mcp", "URL path of the MCP endpoint")
	fs.BoolVar(&cfg.stdio, "stdio", false, "serve one client over stdin and stdout (newline-delimited JSON-RPC) instead of HTTP; exits when stdin closes")
	fs.BoolVar(&cfg.stateless, "stateless", false, "serve without sessions (no Mcp-Session-Id; server-to-client requests such as elicitation fail)")
	fs.BoolVar(&cfg.jsonResponse, "json", false, "answer POSTs with application/json instead of an SSE stream")
	fs.StringVar(&cfg.maxProtocolVersion, "max-protocol-version", defaultMaxProtocolVersion,
		"newest MCP protocol version to negotiate; requests with a newer MCP-Protocol-Version header get HTTP 400 (one of "+
			strings.Join(mcp.SupportedProtocolVersions(), ", ")+")")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.BoolVar(&cfg.anyHost, "any-host", false, "accept requests with any Host header on a loopback address (disables the SDK's DNS rebinding protection)")
	fs.BoolVar(&cfg.fixtures, "fixtures", false, "add the tools the official conformance suite's tasks scenarios call (greet, slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input, test_tool_with_task)")
	fs.BoolVar(&cfg.diagnostics, "diagnostics", false, "add the tools the official conformance suite's 2026-07-28 server-stateless scenario calls (test_missing_capability, test_streaming_elicitation, test_logging_tool, test_trigger_tool_change)")
	fs.BoolVar(&cfg.traceTool, "trace-tool", false, "add the traceparent tool, which returns the W3C traceparent header its call arrived with (tracing tests)")
	fs.BoolVar(&cfg.everything, "everything", false, "add the tools (test_*), resources, prompts, completions and subscriptions the official conformance suite's 2025-era server scenarios call")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 5*time.Second, "at shutdown, how long running requests may take before they are cut")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !strings.HasPrefix(cfg.path, "/") {
		return config{}, fmt.Errorf("--path %q: must start with /", cfg.path)
	}
	if !slices.Contains(mcp.SupportedProtocolVersions(), cfg.maxProtocolVersion) {
		return config{}, fmt.Errorf("--max-protocol-version %q: want one of %s",
			cfg.maxProtocolVersion, strings.Join(mcp.SupportedProtocolVersions(), ", "))
	}
	return cfg, nil
}

// run serves until ctx is done, then shuts down: it stops accepting, gives
// running requests cfg.shutdownTimeout to finish (closing each MCP session
// once its calls returned), then ends running tool calls and closes all
// connections. It writes the ready line to ready.
func run(ctx context.Context, cfg config, log *slog.Logger, ready io.Writer) error {
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	root, cancelRoot := context.WithCancel(context.Background())
	defer cancelRoot()
	server := newServer(root, cfg, log)
	srv := &http.Server{
		Handler:           newHandler(cfg, server, log),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "stateless", cfg.stateless, "json", cfg.jsonResponse, "max_protocol_version", cfg.maxProtocolVersion)
	fmt.Fprintf(ready, "listening on http://%s%s\n", ln.Addr(), cfg.path)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	closed := make(chan struct{})
	go func() { // ends once every session's calls returned; cancelRoot below bounds that
		defer close(closed)
		closeSessions(server)
	}()
	err = srv.Shutdown(sctx)
	cancelRoot()
	if err != nil {
		log.Warn("requests still running at shutdown, closing", "err", err)
		err = srv.Close()
	}
	<-closed
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// runStdio serves one session on stdin and stdout until the client closes
// stdin or ctx is done (SIGINT, SIGTERM).
func runStdio(ctx context.Context, cfg config, log *slog.Logger) error {
	root, cancelRoot := context.WithCancel(ctx)
	defer cancelRoot()
	server := newServer(root, cfg, log)
	log.Info("serving on stdio", "max_protocol_version", cfg.maxProtocolVersion, "pid", os.Getpid())
	err := server.Run(root, &mcp.StdioTransport{})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// sdkLogger returns the logger given to the SDK: log, but only from warn up
// unless log is at debug. The SDK logs raw session IDs at info.
func sdkLogger(log *slog.Logger) *slog.Logger {
	return slog.New(quietHandler{log.Handler()})
}

// quietHandler drops records below warn unless its handler is at debug.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l) && (l >= slog.LevelWarn || h.Handler.Enabled(ctx, slog.LevelDebug))
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}
