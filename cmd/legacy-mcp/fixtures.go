package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The conformance fixtures (--fixtures) are the tools the official MCP
// conformance suite's tasks scenarios call. Their behaviour is that of plain
// tools without tasks; taskgate's policy decides which of them become tasks
// (e2e/testdata/conformance-policy.yaml).
//
// The tools that ask the user are written in the multi round-trip style of
// MCP 2026-07-28: the handler returns its questions as InputRequests and is
// called again with the answers. The SDK turns that into server-to-client
// elicitation/create requests on the call's stream for clients of 2025-11-25
// and older, and into an InputRequiredResult for clients of 2026-07-28, so
// the same fixture serves an upstream of either era.

// fixtureWork is how long the fixtures that stand for real work take before
// they answer or ask: long enough that a proxy deciding by a short promote
// window makes them tasks, short enough for a test run.
const fixtureWork = time.Second

// slowComputeMax bounds slow_compute's seconds.
const slowComputeMax = 3600

// addFixtures registers greet, slow_compute, failing_job, protocol_error_job,
// confirm_delete, multi_input and test_tool_with_task on s.
func addFixtures(t *tools, s *mcp.Server) {
	addTool(t, s, &mcp.Tool{
		Name:        "greet",
		Description: `Returns "Hello, {name}!" at once.`,
		InputSchema: rawSchema(`{
			"type": "object",
			"properties": {"name": {"type": "string", "default": "World"}},
			"additionalProperties": false
		}`),
	}, t.greet)
	addTool(t, s, &mcp.Tool{
		Name:        "slow_compute",
		Description: "Sleeps the given number of seconds (0: answers at once), then returns a text naming the label. Stops when the call is cancelled.",
		InputSchema: rawSchema(fmt.Sprintf(`{
			"type": "object",
			"properties": {
				"seconds": {"type": "number", "minimum": 0, "maximum": %d, "default": 0},
				"label": {"type": "string"}
			},
			"additionalProperties": false
		}`, slowComputeMax)),
	}, t.slowCompute)
	addTool(t, s, &mcp.Tool{
		Name:        "failing_job",
		Description: "After about a second, returns a tool result with isError: true.",
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.failingJob)
	addTool(t, s, &mcp.Tool{
		Name:        "protocol_error_job",
		Description: "After about a second, answers with a JSON-RPC error (-32603 with data).",
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.protocolErrorJob)
	addTool(t, s, &mcp.Tool{
		Name:        "confirm_delete",
		Description: `After about a second, asks for confirmation (form {confirm: boolean}), then returns "deleted <filename>" or "kept <filename>".`,
		InputSchema: rawSchema(`{
			"type": "object",
			"properties": {"filename": {"type": "string", "default": "report.txt"}}
		}`),
	}, t.confirmDelete)
	addTool(t, s, &mcp.Tool{
		Name:        "multi_input",
		Description: "After about a second, asks two questions at once (form {name: string} and form {confirm: boolean}), then returns both answers.",
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.multiInput)
	addTool(t, s, &mcp.Tool{
		Name:        "test_tool_with_task",
		Description: `Asks at once "What is your name?" (form {name: string}), then works for about a second and returns a text containing the name.`,
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.toolWithTask)
}

type greetIn struct {
	Name string `json:"name"`
}

func (t *tools) greet(_ context.Context, _ *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, any, error) {
	return textResult("Hello, " + in.Name + "!"), nil, nil
}

type slowComputeIn struct {
	Seconds float64 `json:"seconds"`
	Label   string  `json:"label"`
}

func (t *tools) slowCompute(ctx context.Context, _ *mcp.CallToolRequest, in slowComputeIn) (*mcp.CallToolResult, any, error) {
	if err := t.work(ctx, time.Duration(in.Seconds*float64(time.Second))); err != nil {
		return nil, nil, err
	}
	label := in.Label
	if label == "" {
		label = "slow_compute"
	}
	return textResult(fmt.Sprintf("%s: computed for %s seconds", label, formatSeconds(in.Seconds))), nil, nil
}

func (t *tools) failingJob(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	if err := t.work(ctx, fixtureWork); err != nil {
		return nil, nil, err
	}
	return errorResult("failing_job: the job failed on purpose"), nil, nil
}

func (t *tools) protocolErrorJob(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	if err := t.work(ctx, fixtureWork); err != nil {
		return nil, nil, err
	}
	return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "protocol_error_job: internal error on purpose",
		Data: []byte(`{"tool":"protocol_error_job"}`)}
}

type confirmDeleteIn struct {
	Filename string `json:"filename"`
}

func (t *tools) confirmDelete(ctx context.Context, req *mcp.CallToolRequest, in confirmDeleteIn) (*mcp.CallToolResult, any, error) {
	answer, ok := req.Params.InputResponses["confirm"]
	if !ok {
		if err := t.work(ctx, fixtureWork); err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"confirm": formQuestion("Delete "+in.Filename+"?", "confirm", "boolean"),
		}}, nil, nil
	}
	content, err := accepted(answer)
	if err != nil {
		return errorResult("confirm_delete: " + err.Error()), nil, nil
	}
	if yes, _ := content["confirm"].(bool); yes {
		return textResult("deleted " + in.Filename), nil, nil
	}
	return textResult("kept " + in.Filename), nil, nil
}

func (t *tools) multiInput(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	name, ok1 := req.Params.InputResponses["name"]
	confirm, ok2 := req.Params.InputResponses["confirm"]
	if !ok1 || !ok2 {
		if err := t.work(ctx, fixtureWork); err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"name":    formQuestion("What is your name?", "name", "string"),
			"confirm": formQuestion("Proceed?", "confirm", "boolean"),
		}}, nil, nil
	}
	n, err1 := accepted(name)
	c, err2 := accepted(confirm)
	if err := errors.Join(err1, err2); err != nil {
		return errorResult("multi_input: " + err.Error()), nil, nil
	}
	return textResult(fmt.Sprintf("name=%v confirm=%v", n["name"], c["confirm"])), nil, nil
}

func (t *tools) toolWithTask(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	answer, ok := req.Params.InputResponses["name"]
	if !ok {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"name": formQuestion("What is your name?", "name", "string"),
		}}, nil, nil
	}
	content, err := accepted(answer)
	if err != nil {
		return errorResult("test_tool_with_task: " + err.Error()), nil, nil
	}
	if err := t.work(ctx, fixtureWork); err != nil {
		return nil, nil, err
	}
	return textResult(fmt.Sprintf("Hello, %v! The task is done.", content["name"])), nil, nil
}

// work waits d, or returns an error when the call is cancelled or the
// server shuts down first.
func (t *tools) work(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.root.Done():
		return errors.New("server shutting down")
	case <-timer.C:
		return nil
	}
}

// formQuestion is a form-mode elicitation with one property.
func formQuestion(message, property, typ string) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Mode:    "form",
		Message: message,
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{property: map[string]any{"type": typ}},
			"required":   []string{property},
		},
	}
}

// accepted returns the content of an accepted elicitation answer.
func accepted(r mcp.InputResponse) (map[string]any, error) {
	res, ok := r.(*mcp.ElicitResult)
	if !ok {
		return nil, fmt.Errorf("answer is a %T, not an elicitation result", r)
	}
	if res.Action != "accept" {
		return nil, fmt.Errorf("user did not accept: %s", res.Action)
	}
	return res.Content, nil
}
