// Command mcpgo-peer is a small MCP server built on
// github.com/mark3labs/mcp-go, which implements the MCP 2025-11-25 tasks
// feature natively (tasks kept in memory, in the server process). It serves
// Streamable HTTP and is the comparison peer for taskgate's load tests
// (cmd/tgload): the same echo tool, with tasks answered by the server itself
// instead of by a proxy in front of it.
//
// It is a development tool, not part of taskgate: it is not in the image and
// its tools and flags may change with the tests that use them.
//
// Tools (both with execution.taskSupport "optional", so task-augmented calls
// are run as native mcp-go tasks; --no-tasks drops the tasks capability and
// taskSupport, making the same server a legacy upstream to put behind
// taskgate, for a comparison with the same tool code):
//
//	echo  {"text": string}            returns the text at once
//	slow  {"seconds": number}         sleeps, stops early when cancelled
//	ask_get {"question": string}      asks the client through elicitation on
//	                                  the session's standalone GET stream (as
//	                                  fastmcp servers do), not on the call's
//	                                  stream; returns "you said: <answer>"
//
// Usage:
//
//	mcpgo-peer [--listen 127.0.0.1:3100] [--path /mcp] [--stateful] [--stateless]
//	           [--max-tasks 0] [--no-tasks] [--log-level warn]
//	mcpgo-peer --stdio [--no-tasks] [--log-level warn]
//
// By default the session manager is mcp-go's default (it mints session ids
// without keeping them); --stateful keeps and validates them, --stateless
// mints none. It prints "listening on http://ADDR/PATH" to stderr once it
// accepts connections, and shuts down on SIGINT or SIGTERM. With --stdio it
// serves one client on stdin and stdout instead (mcp-go's ServeStdio, logs
// on stderr) and exits when stdin closes: the mcp-go stdio server of the
// interop matrix (e2e/interop).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// usageNote heads --help: what the program is, and that it is a
// development tool.
const usageNote = "an MCP server on mcp-go with tasks of its own (the comparison peer of taskgate's load tests; --no-tasks: a legacy upstream).\n" +
	"A development tool of taskgate, not part of the product."

// usage writes --help to flag.CommandLine's output.
func usage() {
	fmt.Fprintf(flag.CommandLine.Output(), "mcpgo-peer: %s\n\nUsage of mcpgo-peer:\n", usageNote)
	flag.PrintDefaults()
}

func main() {
	flag.Usage = usage
	listen := flag.String("listen", "127.0.0.1:3100", "address to listen on")
	path := flag.String("path", "/mcp", "URL path of the MCP endpoint")
	stateful := flag.Bool("stateful", false, "keep and validate session ids (mcp-go's InsecureStatefulSessionIdManager)")
	stateless := flag.Bool("stateless", false, "no session ids at all")
	maxTasks := flag.Int("max-tasks", 0, "maximum concurrently running tasks; 0 = unlimited")
	stdio := flag.Bool("stdio", false, "serve one client on stdin/stdout instead of HTTP")
	noTasks := flag.Bool("no-tasks", false, "no tasks: no tasks capability, tools without execution.taskSupport (a legacy upstream for taskgate with the same tools)")
	var level slog.Level = slog.LevelWarn
	flag.TextVar(&level, "log-level", slog.LevelWarn, "log level: debug, info, warn, error")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mcpgo-peer: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *stateful && *stateless {
		fmt.Fprintln(os.Stderr, "mcpgo-peer: --stateful and --stateless exclude each other")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	opts := []server.ServerOption{
		server.WithToolCapabilities(false),
		server.WithLogger(log),
		server.WithRecovery(),
	}
	var toolOpts []mcp.ToolOption
	if !*noTasks {
		opts = append(opts, server.WithTaskCapabilities(true, true, true))
		toolOpts = append(toolOpts, mcp.WithTaskSupport(mcp.TaskSupportOptional))
	}
	if *maxTasks > 0 {
		opts = append(opts, server.WithMaxConcurrentTasks(*maxTasks))
	}
	s := server.NewMCPServer("mcpgo-peer", "0.1.0", opts...)
	echoOpts := append([]mcp.ToolOption{
		mcp.WithDescription("Returns the given text at once."),
		mcp.WithString("text", mcp.Required(), mcp.Description("Text to return.")),
	}, toolOpts...)
	s.AddTool(mcp.NewTool("echo", echoOpts...), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(req.GetString("text", "")), nil
	})
	slowOpts := append([]mcp.ToolOption{
		mcp.WithDescription("Sleeps for the given number of seconds; stops early when cancelled."),
		mcp.WithNumber("seconds", mcp.Description("How long to sleep, in seconds.")),
	}, toolOpts...)
	s.AddTool(mcp.NewTool("slow", slowOpts...), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		d := time.Duration(req.GetFloat("seconds", 5) * float64(time.Second))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return mcp.NewToolResultText(fmt.Sprintf("slept %v", d)), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})

	s.AddTool(mcp.NewTool("ask_get",
		mcp.WithDescription("Asks the given question through elicitation on the session's standalone GET stream "+
			"(not on the call's own stream) and returns \"you said: <answer>\"."),
		mcp.WithString("question", mcp.Required(), mcp.Description("Question shown to the user.")),
	), askOnGetStream)

	if *stdio {
		if err := server.ServeStdio(s, server.WithErrorLogger(slog.NewLogLogger(log.Handler(), slog.LevelError))); err != nil {
			fmt.Fprintf(os.Stderr, "mcpgo-peer: %v\n", err)
			os.Exit(1)
		}
		return
	}

	hopts := []server.StreamableHTTPOption{
		server.WithEndpointPath(*path),
		server.WithStreamableHTTPLogger(log),
	}
	switch {
	case *stateful:
		hopts = append(hopts, server.WithStateful(true))
	case *stateless:
		hopts = append(hopts, server.WithStateLess(true))
	}
	h := server.NewStreamableHTTPServer(s, hopts...)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpgo-peer: %v\n", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle(*path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "listening on http://%s%s\n", ln.Addr(), *path)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-served:
		fmt.Fprintf(os.Stderr, "mcpgo-peer: %v\n", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
	}
	_ = h.Shutdown(sctx)
}

// askOnGetStream asks through the session's standalone GET stream: mcp-go
// sends a server-to-client request on the call's own SSE stream when the
// context carries that stream, so the request is made with a context that
// has only the call's cancellation.
func askOnGetStream(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	sess, ok := server.ClientSessionFromContext(ctx).(server.SessionWithElicitation)
	if !ok {
		return mcp.NewToolResultError("this session cannot elicit"), nil
	}
	ectx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	res, err := sess.RequestElicitation(ectx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
		Message: req.GetString("question", ""),
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"answer": map[string]any{"type": "string"}},
			"required":   []string{"answer"},
		},
	}})
	if err != nil {
		return nil, err
	}
	if res.Action != mcp.ElicitationResponseActionAccept {
		return mcp.NewToolResultError("the user did not answer: " + string(res.Action)), nil
	}
	answer, _ := res.Content.(map[string]any)["answer"].(string)
	return mcp.NewToolResultText("you said: " + answer), nil
}
