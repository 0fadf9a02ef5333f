package main

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The diagnostics set (--diagnostics) is what the official MCP conformance
// suite's 2026-07-28 server-stateless scenario calls: test_missing_capability
// (needs sampling), test_streaming_elicitation (asks the user),
// test_logging_tool (logs) and test_trigger_tool_change (changes the tool
// list); and test_url_elicitation, whose first call needs a URL visited
// (the 2025 error -32042). Like the fixtures they are written once for both protocol eras.

// codeMissingCapability is the 2026-07-28 error for a request that needs
// a client capability it did not declare.
const codeMissingCapability = -32021

// dynamicTool is the tool test_trigger_tool_change adds and removes.
const dynamicTool = "test_dynamic_tool"

// addDiagnostics registers the diagnostics set on s.
func addDiagnostics(t *tools, s *mcp.Server) {
	addTool(t, s, &mcp.Tool{
		Name: "test_missing_capability",
		Description: "Needs the client's sampling capability: without it, fails with -32021 naming sampling; " +
			"with it, asks the client for a completion and returns its text.",
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.missingCapability)
	addTool(t, s, &mcp.Tool{
		Name:        "test_streaming_elicitation",
		Description: `Asks at once "Continue?" (form {confirm: boolean}), then returns the answer.`,
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.streamingElicitation)
	addTool(t, s, &mcp.Tool{
		Name:        "test_logging_tool",
		Description: "Sends three log messages (debug, info, warning) at the request's log level, then returns.",
		InputSchema: rawSchema(`{"type": "object"}`),
	}, t.loggingTool)
	var visits atomic.Int32
	addTool(t, s, &mcp.Tool{
		Name: "test_url_elicitation",
		Description: "The first call fails with -32042 (URL elicitation required: visit https://example.com/authorize); " +
			`later calls stand for the visit done and return "authorized".`,
		InputSchema: rawSchema(`{"type": "object"}`),
	}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
		if visits.Add(1) == 1 {
			return nil, nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url",
				Message: "Authorize the demo", URL: "https://example.com/authorize", ElicitationID: "el-1"}})
		}
		return textResult("authorized"), nil, nil
	})
	var mu sync.Mutex
	present := false
	addTool(t, s, &mcp.Tool{
		Name:        "test_trigger_tool_change",
		Description: "Adds " + dynamicTool + " when it is absent and removes it otherwise: the tool list changes.",
		InputSchema: rawSchema(`{"type": "object"}`),
	}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		defer mu.Unlock()
		if present {
			s.RemoveTools(dynamicTool)
		} else {
			addTool(t, s, &mcp.Tool{Name: dynamicTool, Description: "Returns at once.", InputSchema: rawSchema(`{"type": "object"}`)},
				func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
					return textResult("dynamic"), nil, nil
				})
		}
		present = !present
		return textResult("tool list changed"), nil, nil
	})
}

func (t *tools) missingCapability(_ context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	if caps := req.ClientCapabilities(); caps == nil || caps.Sampling == nil {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"sampling": map[string]any{}}})
		return nil, nil, &jsonrpc.Error{Code: codeMissingCapability,
			Message: "test_missing_capability needs the client's sampling capability", Data: data}
	}
	answer, ok := req.Params.InputResponses["sample"]
	if !ok {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"sample": &mcp.CreateMessageParams{MaxTokens: 16, Messages: []*mcp.SamplingMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Say hello."}}}},
		}}, nil, nil
	}
	res, ok := answer.(*mcp.CreateMessageResult)
	if !ok {
		return errorResult("test_missing_capability: the answer is not a sampling result"), nil, nil
	}
	if tc, ok := res.Content.(*mcp.TextContent); ok {
		return textResult("sampled: " + tc.Text), nil, nil
	}
	return textResult("sampled"), nil, nil
}

func (t *tools) streamingElicitation(_ context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	answer, ok := req.Params.InputResponses["confirm"]
	if !ok {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"confirm": formQuestion("Continue?", "confirm", "boolean"),
		}}, nil, nil
	}
	content, err := accepted(answer)
	if err != nil {
		return errorResult("test_streaming_elicitation: " + err.Error()), nil, nil
	}
	if yes, _ := content["confirm"].(bool); yes {
		return textResult("continued"), nil, nil
	}
	return textResult("stopped"), nil, nil
}

func (t *tools) loggingTool(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
	for _, l := range []mcp.LoggingLevel{"debug", "info", "warning"} {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: l, Logger: "test_logging_tool", Data: "a " + string(l) + " message"})
	}
	return textResult("logged"), nil, nil
}
