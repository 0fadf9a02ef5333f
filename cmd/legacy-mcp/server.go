package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP method names this file intercepts or calls.
const (
	methodInitialize = "initialize"
	methodSetLevel   = "logging/setLevel"
)

// defaultSessionLogLevel is the MCP log level a session starts at. The SDK
// sends no notifications/message until the client calls logging/setLevel; a
// demo server should show its logs without that step, as the SDK's own
// stateless sessions do (they start at "info").
const defaultSessionLogLevel mcp.LoggingLevel = "info"

// Limits of the tools' inputs.
const (
	slowDefaultSeconds = 5
	slowMaxSeconds     = 3600
	slowMaxSteps       = 36000
	largeDefaultBytes  = 1 << 20
	largeMaxBytes      = 64 << 20
	largePattern       = "0123456789abcdef"
)

// newServer returns the demo MCP server with the tools echo, slow, fail,
// rpc_error, large, ask and stats. Its protocol versions are capped at
// cfg.maxProtocolVersion. Cancelling root (at shutdown) ends running slow and
// ask calls.
func newServer(root context.Context, cfg config, log *slog.Logger) *mcp.Server {
	opts := &mcp.ServerOptions{
		Instructions: "A demo MCP server without tasks support, used to try taskgate. " +
			"Tools: echo, slow (long-running with progress), fail, rpc_error, large, ask (elicitation), stats.",
		Logger:                    sdkLogger(log),
		SupportedProtocolVersions: versionsUpTo(cfg.maxProtocolVersion),
	}
	every := &everything{subs: map[string]bool{}}
	if cfg.everything {
		every.options(opts)
	}
	s := mcp.NewServer(&mcp.Implementation{
		Name:    "legacy-mcp",
		Title:   "taskgate demo legacy MCP server",
		Version: "0.1.0",
	}, opts)
	s.AddReceivingMiddleware(defaultLogLevel)

	t := &tools{stats: newStats(), root: root}
	addTool(t, s, &mcp.Tool{
		Name:        "echo",
		Description: "Returns the given text at once.",
		InputSchema: rawSchema(`{
			"type": "object",
			"properties": {"text": {"type": "string", "description": "Text to return."}},
			"required": ["text"],
			"additionalProperties": false
		}`),
	}, t.echo)
	addTool(t, s, &mcp.Tool{
		Name: "slow",
		Description: "Sleeps for the given number of seconds, split into steps. After each step it sends " +
			"notifications/progress (when the call carries a progressToken) with the message \"step i of n\", " +
			"and a notifications/message log entry. Stops early when the call is cancelled. " +
			`Returns "slept N seconds".`,
		InputSchema: rawSchema(fmt.Sprintf(`{
			"type": "object",
			"properties": {
				"seconds": {"type": "number", "minimum": 0, "maximum": %d, "default": %d,
					"description": "How long to sleep, in seconds; fractions allowed."},
				"steps": {"type": "integer", "minimum": 1, "maximum": %d,
					"description": "Number of steps, one progress notification each. Default: seconds rounded up, at least 1."}
			},
			"additionalProperties": false
		}`, slowMaxSeconds, slowDefaultSeconds, slowMaxSteps)),
	}, t.slow)
	addTool(t, s, &mcp.Tool{
		Name:        "fail",
		Description: "Returns a tool result with isError:true whose text is the given reason.",
		InputSchema: rawSchema(`{
			"type": "object",
			"properties": {"reason": {"type": "string", "default": "failed on request",
				"description": "Text of the error result."}},
			"additionalProperties": false
		}`),
	}, t.fail)
	addTool(t, s, &mcp.Tool{
		Name: "rpc_error",
		Description: "Answers the tools/call with a JSON-RPC error (not a tool result) with the given code " +
			"and message, and data {\"tool\":\"rpc_error\",\"code\":code}.",
		InputSchema: rawSchema(fmt.Sprintf(`{
			"type": "object",
			"properties": {
				"code": {"type": "integer", "default": %d, "description": "JSON-RPC error code."},
				"message": {"type": "string", "default": "rpc_error requested", "description": "JSON-RPC error message."}
			},
			"additionalProperties": false
		}`, jsonrpc.CodeInternalError)),
	}, t.rpcError)
	addTool(t, s, &mcp.Tool{
		Name: "large",
		Description: "Returns one text content of exactly the given number of bytes (the pattern " +
			`"0123456789abcdef" repeated) and structuredContent {"sha256": hex digest of the text, "bytes": N}.`,
		InputSchema: rawSchema(fmt.Sprintf(`{
			"type": "object",
			"properties": {"bytes": {"type": "integer", "minimum": 0, "maximum": %d, "default": %d,
				"description": "Size of the text in bytes."}},
			"additionalProperties": false
		}`, largeMaxBytes, largeDefaultBytes)),
	}, t.large)
	addTool(t, s, &mcp.Tool{
		Name: "ask",
		Description: "Asks the client the given question through elicitation (form mode, schema {answer: string}) " +
			`and returns "you said: <answer>"; an error result when the user declines or cancels.`,
		InputSchema: rawSchema(`{
			"type": "object",
			"properties": {"question": {"type": "string", "description": "Question shown to the user."}},
			"required": ["question"],
			"additionalProperties": false
		}`),
	}, t.ask)
	addTool(t, s, &mcp.Tool{
		Name: "stats",
		Description: "Returns counters of this server process: calls per tool, cancelled calls " +
			"(calls whose context was cancelled before they returned), and calls running now (not counting this one).",
		InputSchema: rawSchema(`{"type": "object", "additionalProperties": false}`),
	}, t.statsTool)
	if cfg.fixtures {
		addFixtures(t, s)
	}
	if cfg.everything {
		addEverything(t, s)
	}
	if cfg.traceTool {
		addTraceTool(t, s)
	}
	if cfg.diagnostics {
		addDiagnostics(t, s)
	}
	return s
}

// versionsUpTo returns the protocol versions the SDK supports that are not
// newer than max. Versions are dates, so they compare as strings.
func versionsUpTo(max string) []string {
	var vs []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v <= max {
			vs = append(vs, v)
		}
	}
	return vs
}

// defaultLogLevel sets a new session's log level to defaultSessionLogLevel
// once initialize succeeded, through the SDK's own logging/setLevel handler.
// A later logging/setLevel from the client overrides it.
func defaultLogLevel(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != methodInitialize || err != nil {
			return res, err
		}
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			_, _ = next(ctx, methodSetLevel, &mcp.ServerRequest[*mcp.SetLoggingLevelParams]{
				Session: ss,
				Params:  &mcp.SetLoggingLevelParams{Level: defaultSessionLogLevel},
			})
		}
		return res, nil
	}
}

// rawSchema returns a hand-written JSON schema; hand-written schemas carry
// defaults and bounds that the SDK applies and checks before a handler runs.
func rawSchema(s string) json.RawMessage {
	if !json.Valid([]byte(s)) {
		panic("legacy-mcp: invalid schema: " + s)
	}
	return json.RawMessage(s)
}

// addTool registers h under t.Name, counted in the stats.
func addTool[In, Out any](tl *tools, s *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		done := tl.stats.begin(t.Name)
		defer func() { done(ctx.Err() != nil) }()
		return h(ctx, req, in)
	})
}

// tools holds the tool handlers and their shared state.
type tools struct {
	stats *stats
	root  context.Context // cancelled at shutdown: running slow and ask calls end
}

type echoIn struct {
	Text string `json:"text"`
}

func (t *tools) echo(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
	return textResult(in.Text), nil, nil
}

type slowIn struct {
	Seconds float64 `json:"seconds"`
	Steps   int     `json:"steps"`
}

func (t *tools) slow(ctx context.Context, req *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
	steps := in.Steps
	if steps == 0 {
		steps = max(1, int(math.Ceil(in.Seconds)))
	}
	total := time.Duration(in.Seconds * float64(time.Second))
	token := req.Params.GetProgressToken()
	start := time.Now()
	for i := 1; i <= steps; i++ {
		// Each step ends at its share of the total, so rounding does not add up.
		timer := time.NewTimer(time.Until(start.Add(total * time.Duration(i) / time.Duration(steps))))
		select {
		case <-ctx.Done():
			timer.Stop()
			// The SDK still answers a cancelled call: with this error as an
			// isError result.
			return nil, nil, fmt.Errorf("slow: cancelled after step %d of %d: %w", i-1, steps, ctx.Err())
		case <-t.root.Done():
			timer.Stop()
			return errorResult("server shutting down"), nil, nil
		case <-timer.C:
		}
		msg := fmt.Sprintf("step %d of %d", i, steps)
		if token != nil {
			// Notification errors mean the client is gone; the ctx check
			// above ends the call then.
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Message:       msg,
				Progress:      float64(i),
				Total:         float64(steps),
			})
		}
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{
			Level:  "info",
			Logger: "slow",
			Data:   map[string]any{"message": msg, "step": i, "steps": steps},
		})
	}
	return textResult(fmt.Sprintf("slept %s seconds", formatSeconds(in.Seconds))), nil, nil
}

// formatSeconds prints 5 as "5" and 0.25 as "0.25".
func formatSeconds(s float64) string {
	return fmt.Sprintf("%g", s)
}

type failIn struct {
	Reason string `json:"reason"`
}

func (t *tools) fail(_ context.Context, _ *mcp.CallToolRequest, in failIn) (*mcp.CallToolResult, any, error) {
	return errorResult(in.Reason), nil, nil
}

type rpcErrorIn struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (t *tools) rpcError(_ context.Context, _ *mcp.CallToolRequest, in rpcErrorIn) (*mcp.CallToolResult, any, error) {
	data, err := json.Marshal(map[string]any{"tool": "rpc_error", "code": in.Code})
	if err != nil {
		return nil, nil, err
	}
	// The SDK answers with a JSON-RPC error when a handler returns a
	// *jsonrpc.Error; any other error becomes an isError result.
	return nil, nil, &jsonrpc.Error{Code: in.Code, Message: in.Message, Data: data}
}

type largeIn struct {
	Bytes int `json:"bytes"`
}

type largeOut struct {
	SHA256 string `json:"sha256" jsonschema:"hex SHA-256 of the text content"`
	Bytes  int    `json:"bytes" jsonschema:"length of the text content in bytes"`
}

func (t *tools) large(_ context.Context, _ *mcp.CallToolRequest, in largeIn) (*mcp.CallToolResult, largeOut, error) {
	text := pattern(in.Bytes)
	sum := sha256.Sum256([]byte(text))
	return textResult(text), largeOut{SHA256: hex.EncodeToString(sum[:]), Bytes: len(text)}, nil
}

// pattern returns n bytes of largePattern repeated.
func pattern(n int) string {
	b := make([]byte, n)
	for i := 0; i < n; i += len(largePattern) {
		copy(b[i:], largePattern)
	}
	return string(b)
}

type askIn struct {
	Question string `json:"question"`
}

func (t *tools) ask(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(t.root, cancel)()
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
		Mode:    "form",
		Message: in.Question,
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"answer": map[string]any{"type": "string", "description": "Your answer."}},
			"required":   []string{"answer"},
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return errorResult("elicitation failed: " + err.Error()), nil, nil
	}
	if res.Action != "accept" {
		return errorResult("user did not answer: " + res.Action), nil, nil
	}
	answer, ok := res.Content["answer"].(string)
	if !ok {
		return errorResult("elicitation result has no string answer"), nil, nil
	}
	return textResult("you said: " + answer), nil, nil
}

type statsOut struct {
	Calls     map[string]int64 `json:"calls" jsonschema:"calls per tool since start, this one included"`
	Cancelled int64            `json:"cancelled" jsonschema:"calls whose context was cancelled before they returned"`
	Running   int64            `json:"running" jsonschema:"calls running now, not counting this one"`
}

func (t *tools) statsTool(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, statsOut, error) {
	out := t.stats.snapshot()
	out.Running-- // this call
	return nil, out, nil
}

// stats counts tool calls. It is safe for concurrent use.
type stats struct {
	mu        sync.Mutex
	calls     map[string]int64
	cancelled int64
	running   int64
}

func newStats() *stats { return &stats{calls: make(map[string]int64)} }

// begin counts a call of tool as started; the returned func counts it as
// ended, cancelled or not.
func (s *stats) begin(tool string) (end func(cancelled bool)) {
	s.mu.Lock()
	s.calls[tool]++
	s.running++
	s.mu.Unlock()
	return func(cancelled bool) {
		s.mu.Lock()
		s.running--
		if cancelled {
			s.cancelled++
		}
		s.mu.Unlock()
	}
}

func (s *stats) snapshot() statsOut {
	s.mu.Lock()
	defer s.mu.Unlock()
	return statsOut{Calls: maps.Clone(s.calls), Cancelled: s.cancelled, Running: s.running}
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
