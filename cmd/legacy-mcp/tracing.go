package main

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// addTraceTool registers traceparent on s: it returns the W3C traceparent
// header of the HTTP request its call arrived on ("" without one, or over
// stdio), so a test sees which trace context taskgate sent the upstream.
func addTraceTool(t *tools, s *mcp.Server) {
	addTool(t, s, &mcp.Tool{
		Name:        "traceparent",
		Description: "Returns the traceparent header (W3C Trace Context) of the HTTP request that carried this call.",
		InputSchema: rawSchema(`{"type": "object", "additionalProperties": false}`),
	}, func(_ context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		var tp string
		if req.Extra != nil && req.Extra.Header != nil {
			tp = req.Extra.Header.Get("Traceparent")
		}
		return textResult(tp), nil, nil
	})
}
