package proxy

import (
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/wire"
)

var (
	benchSmallCall = []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"progressToken":17}}}`)
	benchLargeCall = []byte(`{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"ingest","arguments":{"rows":[` +
		strings.TrimSuffix(strings.Repeat(`{"id":12345,"name":"row name \u00e9","tags":["a","b"],"v":-1.5e3},`, 1024), ",") + `]}}}`)
)

func BenchmarkParseEnvelope(b *testing.B) {
	if n := len(benchLargeCall); n < 64<<10 {
		b.Fatalf("large call is %d bytes, want >= 64 KiB", n)
	}
	for _, bc := range []struct {
		name string
		msg  []byte
	}{
		{name: "small tools/call", msg: benchSmallCall},
		{name: "64KiB params", msg: benchLargeCall},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.msg)))
			for b.Loop() {
				if _, err := wire.ParseEnvelope(bc.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestParseEnvelopeAllocs is the allocation budget of the envelope parse
// on the hot path: every request pays it, so a new allocation there must be
// a decision, not an accident. Measured: 0 for a tools/call (its method
// is interned, nothing escapes), 1 for a method that is not (the string).
func TestParseEnvelopeAllocs(t *testing.T) {
	tests := []struct {
		name   string
		msg    []byte
		budget float64
	}{
		{name: "small tools/call", msg: benchSmallCall, budget: 0},
		{name: "64KiB tools/call", msg: benchLargeCall, budget: 0},
		{name: "other method", msg: []byte(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x"}}`), budget: 1},
		{name: "response", msg: []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`), budget: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() {
				if _, err := wire.ParseEnvelope(tc.msg); err != nil {
					t.Fatal(err)
				}
			})
			if got > tc.budget {
				t.Errorf("ParseEnvelope allocates %v times per call, budget %v", got, tc.budget)
			}
		})
	}
}

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
