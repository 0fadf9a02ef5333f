package proxy

import (
	"io"
	"testing"

	"github.com/valyala/fasthttp"
)

var (
	// benchSmallCall is a tools/call without a task (the pass-through path).
	benchSmallCall = []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"progressToken":17}}}`)
)

// BenchmarkPassThrough measures ServeFastHTTP for a tools/call without a
// task against an in-memory upstream (the common path: parse, policy
// check, forward, relay).
func BenchmarkPassThrough(b *testing.B) {
	for _, bc := range []struct {
		name     string
		upstream fasthttp.RequestHandler
	}{
		{name: "JSON answer", upstream: jsonAnswer(`{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"hello"}]}}`)},
		{name: "SSE answer", upstream: sseAnswer("id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":17,\"progress\":1}}\n\n" +
			"id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}}\n\n")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tp := newTestProxy(b, bc.upstream)
			req := newPost(string(benchSmallCall), "Mcp-Session-Id", "bench", "Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer t")
			var rc fasthttp.RequestCtx
			rc.Init(req, nil, nil)
			b.ReportAllocs()
			for b.Loop() {
				req.CopyTo(&rc.Request)
				tp.h.ServeFastHTTP(&rc)
				if rc.Response.StatusCode() != fasthttp.StatusOK {
					b.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
				}
				if err := rc.Response.BodyWriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
				rc.Response.Reset()
			}
			// Only the last request is kept: the upstream records them all.
			tp.up.mu.Lock()
			tp.up.reqs = nil
			tp.up.mu.Unlock()
		})
	}
}
