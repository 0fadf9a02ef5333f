package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ---- mcp-go v1.2.1 ----

// mcpgoAdapter is mark3labs/mcp-go's client on the 2025-11-25 wire, with
// its own task API (tasks/result, tasks/cancel). v1.2.1's CallTool cannot
// return a CreateTaskResult, so task-augmented calls are sent through the
// client's transport (same session and headers).
type mcpgoAdapter struct {
	tgt    target
	c      *mcpgoclient.Client
	mu     sync.Mutex
	onProg map[string]func()
	nAsked atomic.Int64
	seq    atomic.Int64
}

func newMCPGoAdapter(tgt target) adapter {
	return &mcpgoAdapter{tgt: tgt, onProg: map[string]func(){}}
}

func (a *mcpgoAdapter) Elicit(context.Context, mcpgo.ElicitationRequest) (*mcpgo.ElicitationResult, error) {
	a.nAsked.Add(1)
	return &mcpgo.ElicitationResult{ElicitationResponse: mcpgo.ElicitationResponse{
		Action: mcpgo.ElicitationResponseActionAccept, Content: elicitAnswer}}, nil
}

func (a *mcpgoAdapter) connect(ctx context.Context) (string, string, error) {
	var tr transport.Interface
	var err error
	if a.tgt.URL != "" {
		tr, err = transport.NewStreamableHTTP(a.tgt.URL, transport.WithContinuousListening())
	} else {
		tr = transport.NewStdio(a.tgt.Command, envList(a.tgt.Env), a.tgt.Args...)
	}
	if err != nil {
		return "", "", err
	}
	a.c = mcpgoclient.NewClient(tr, mcpgoclient.WithElicitationHandler(a))
	a.c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		tok := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
		a.mu.Lock()
		f := a.onProg[tok]
		a.mu.Unlock()
		if f != nil {
			f()
		}
	})
	if err := a.c.Start(ctx); err != nil {
		return "", "", err
	}
	req := mcpgo.InitializeRequest{}
	req.Params.ProtocolVersion = "2025-11-25"
	req.Params.ClientInfo = mcpgo.Implementation{Name: "interop-mcp-go", Version: "1.0.0"}
	req.Params.Capabilities.Elicitation = &mcpgo.ElicitationCapability{}
	res, err := a.c.Initialize(ctx, req)
	if err != nil {
		return "", "", mcpgoErr(err)
	}
	return res.ServerInfo.Name, res.ProtocolVersion, nil
}

func (a *mcpgoAdapter) listTools(ctx context.Context) ([]toolInfo, error) {
	res, err := a.c.ListTools(ctx, mcpgo.ListToolsRequest{})
	if err != nil {
		return nil, mcpgoErr(err)
	}
	var out []toolInfo
	for _, t := range res.Tools {
		ti := toolInfo{name: t.Name}
		if t.Execution != nil {
			ti.taskSupport = string(t.Execution.TaskSupport)
		}
		out = append(out, ti)
	}
	return out, nil
}

func (a *mcpgoAdapter) progressMeta(onProgress func()) *mcpgo.Meta {
	if onProgress == nil {
		return nil
	}
	tok := nextToken()
	a.mu.Lock()
	a.onProg[tok] = onProgress
	a.mu.Unlock()
	return &mcpgo.Meta{ProgressToken: tok}
}

func (a *mcpgoAdapter) call(ctx context.Context, name string, args map[string]any, onProgress func()) (map[string]any, error) {
	res, err := a.c.CallTool(ctx, mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{
		Name: name, Arguments: args, Meta: a.progressMeta(onProgress)}})
	if err != nil {
		return nil, mcpgoErr(err)
	}
	return asMap(res)
}

func (a *mcpgoAdapter) hasTasks() bool     { return true }
func (a *mcpgoAdapter) taskProgress() bool { return true }
func (a *mcpgoAdapter) asked() int         { return int(a.nAsked.Load()) }

// createTask sends the task-augmented tools/call and returns the task id.
func (a *mcpgoAdapter) createTask(ctx context.Context, name string, args map[string]any, onProgress func()) (string, error) {
	params := map[string]any{"name": name, "arguments": args, "task": map[string]any{"ttl": 60000}}
	if m := a.progressMeta(onProgress); m != nil {
		params["_meta"] = map[string]any{"progressToken": m.ProgressToken}
	}
	resp, err := a.c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcpgo.JSONRPC_VERSION, ID: mcpgo.NewRequestId(fmt.Sprintf("interop-%d", a.seq.Add(1))),
		Method: "tools/call", Params: params,
	})
	if err != nil {
		return "", err
	}
	if resp.Error != nil {
		return "", &rpcError{code: resp.Error.Code, msg: resp.Error.Message}
	}
	var created mcpgo.CreateTaskResult
	if err := json.Unmarshal(resp.Result, &created); err != nil || created.Task.TaskId == "" {
		return "", fmt.Errorf("tools/call with a task: no CreateTaskResult in %s", resp.Result)
	}
	return created.Task.TaskId, nil
}

func (a *mcpgoAdapter) callTask(ctx context.Context, name string, args map[string]any, onProgress func()) (map[string]any, error) {
	id, err := a.createTask(ctx, name, args, onProgress)
	if err != nil {
		return nil, err
	}
	res, err := a.c.TaskResult(ctx, mcpgo.TaskResultRequest{Params: mcpgo.TaskResultParams{TaskId: id}})
	if err != nil {
		return nil, mcpgoErr(err)
	}
	return asMap(res)
}

func (a *mcpgoAdapter) startTask(ctx context.Context, name string, args map[string]any) (func() error, error) {
	id, err := a.createTask(ctx, name, args, nil)
	if err != nil {
		return nil, err
	}
	return func() error {
		_, err := a.c.CancelTask(ctx, mcpgo.CancelTaskRequest{Params: mcpgo.CancelTaskParams{TaskId: id}})
		return mcpgoErr(err)
	}, nil
}

func (a *mcpgoAdapter) close() {
	if a.c != nil {
		_ = a.c.Close()
	}
}

// mcpgoErr gives back the JSON-RPC code mcp-go maps its errors from.
func mcpgoErr(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range []struct {
		sentinel error
		code     int
	}{
		{mcpgo.ErrParseError, -32700}, {mcpgo.ErrInvalidRequest, -32600}, {mcpgo.ErrMethodNotFound, -32601},
		{mcpgo.ErrInvalidParams, -32602}, {mcpgo.ErrInternalError, -32603},
	} {
		if errors.Is(err, m.sentinel) {
			return &rpcError{code: m.code, msg: err.Error()}
		}
	}
	return err
}

// ---- go-sdk v1.8.0 ----

// gosdkAdapter is the official Go SDK's client (2025-11-25). It has no
// task API and its Tool type has no execution field: its cells check
// discovery, plain calls, progress, errors and cancellation.
type gosdkAdapter struct {
	tgt    target
	cs     *gosdk.ClientSession
	mu     sync.Mutex
	onProg map[string]func()
	nAsked atomic.Int64
}

func newGoSDKAdapter(tgt target) adapter {
	return &gosdkAdapter{tgt: tgt, onProg: map[string]func(){}}
}

func (a *gosdkAdapter) connect(ctx context.Context) (string, string, error) {
	c := gosdk.NewClient(&gosdk.Implementation{Name: "interop-go-sdk", Version: "1.0.0"}, &gosdk.ClientOptions{
		ElicitationHandler: func(context.Context, *gosdk.ElicitRequest) (*gosdk.ElicitResult, error) {
			a.nAsked.Add(1)
			return &gosdk.ElicitResult{Action: "accept", Content: elicitAnswer}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *gosdk.ProgressNotificationClientRequest) {
			a.mu.Lock()
			f := a.onProg[fmt.Sprint(req.Params.ProgressToken)]
			a.mu.Unlock()
			if f != nil {
				f()
			}
		},
	})
	var tr gosdk.Transport
	if a.tgt.URL != "" {
		tr = &gosdk.StreamableClientTransport{Endpoint: a.tgt.URL, HTTPClient: withHeaders(a.tgt.Headers)}
	} else {
		cmd := exec.Command(a.tgt.Command, a.tgt.Args...)
		cmd.Env = append(os.Environ(), envList(a.tgt.Env)...)
		tr = &gosdk.CommandTransport{Command: cmd}
	}
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		return "", "", gosdkErr(err)
	}
	a.cs = cs
	return cs.InitializeResult().ServerInfo.Name, cs.InitializeResult().ProtocolVersion, nil
}

func (a *gosdkAdapter) listTools(ctx context.Context) ([]toolInfo, error) {
	res, err := a.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, gosdkErr(err)
	}
	var out []toolInfo
	for _, t := range res.Tools {
		out = append(out, toolInfo{name: t.Name})
	}
	return out, nil
}

func (a *gosdkAdapter) call(ctx context.Context, name string, args map[string]any, onProgress func()) (map[string]any, error) {
	p := &gosdk.CallToolParams{Name: name, Arguments: args}
	if onProgress != nil {
		tok := nextToken()
		a.mu.Lock()
		a.onProg[tok] = onProgress
		a.mu.Unlock()
		p.Meta = gosdk.Meta{"progressToken": tok}
	}
	res, err := a.cs.CallTool(ctx, p)
	if err != nil {
		return nil, gosdkErr(err)
	}
	return asMap(res)
}

func (a *gosdkAdapter) hasTasks() bool     { return false }
func (a *gosdkAdapter) taskProgress() bool { return false }
func (a *gosdkAdapter) asked() int         { return int(a.nAsked.Load()) }
func (a *gosdkAdapter) callTask(context.Context, string, map[string]any, func()) (map[string]any, error) {
	return nil, errors.New("go-sdk v1.8.0 has no task API")
}
func (a *gosdkAdapter) startTask(context.Context, string, map[string]any) (func() error, error) {
	return nil, errors.New("go-sdk v1.8.0 has no task API")
}

func (a *gosdkAdapter) close() {
	if a.cs != nil {
		_ = a.cs.Close()
	}
}

func gosdkErr(err error) error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return &rpcError{code: int(we.Code), msg: we.Message}
	}
	return err
}

func envList(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// withHeaders returns an HTTP client that sends headers with every
// request (nil, the default client, when there are none).
func withHeaders(headers map[string]string) *http.Client {
	if len(headers) == 0 {
		return nil
	}
	return &http.Client{Transport: headerTransport{headers, http.DefaultTransport}}
}

type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	return h.next.RoundTrip(req)
}
