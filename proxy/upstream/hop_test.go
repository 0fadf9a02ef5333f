package upstream

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestStripHopByHop(t *testing.T) {
	tests := []struct {
		name    string
		headers []string
		gone    []string
		kept    []string
	}{
		{name: "RFC list", headers: []string{"Keep-Alive", "1", "Proxy-Authorization", "x", "Te", "trailers", "Trailer", "X", "Upgrade", "y", "Proxy-Connection", "z", "X-A", "a"}, gone: []string{"Keep-Alive", "Proxy-Authorization", "Te", "Trailer", "Upgrade", "Proxy-Connection"}, kept: []string{"X-A"}},
		{name: "Connection-listed names", headers: []string{"Connection", "X-A, x-b ,, X-C", "X-A", "1", "X-B", "2", "X-C", "3", "X-D", "4"}, gone: []string{"X-A", "X-B", "X-C", "Connection"}, kept: []string{"X-D"}},
		{name: "end-to-end headers kept", headers: []string{"Authorization", "Bearer x", "Mcp-Session-Id", "s", "Mcp-Protocol-Version", "2025-11-25", "Last-Event-Id", "e"}, kept: []string{"Authorization", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rh fasthttp.RequestHeader
			var sh fasthttp.ResponseHeader
			for i := 0; i+1 < len(tc.headers); i += 2 {
				rh.Set(tc.headers[i], tc.headers[i+1])
				sh.Set(tc.headers[i], tc.headers[i+1])
			}
			StripRequestHopByHop(&rh)
			StripResponseHopByHop(&sh)
			for _, hd := range []interface{ Peek(string) []byte }{&rh, &sh} {
				for _, g := range tc.gone {
					if v := hd.Peek(g); len(v) > 0 && !(g == "Connection" && string(v) == "keep-alive") {
						t.Errorf("%T: %s = %q after stripping", hd, g, v)
					}
				}
				for _, k := range tc.kept {
					if len(hd.Peek(k)) == 0 {
						t.Errorf("%T: %s removed", hd, k)
					}
				}
			}
		})
	}
}

// TestStripHopByHopParsed: headers as they come off the wire, any case,
// with the special fields fasthttp keeps apart (Connection: close, a chunked
// Transfer-Encoding, Trailer).
func TestStripHopByHopParsed(t *testing.T) {
	var req fasthttp.Request
	raw := "POST /mcp HTTP/1.1\r\nHost: h\r\nconnection: close, x-drop\r\nX-Drop: 1\r\nkeep-alive: timeout=5\r\nTE: trailers\r\n" +
		"X-Keep: 2\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	StripRequestHopByHop(&req.Header)
	req.Header.ResetConnectionClose()
	for _, g := range []string{"X-Drop", "Keep-Alive", "Te", "Connection"} {
		if v := req.Header.Peek(g); len(v) > 0 {
			t.Errorf("request %s = %q after stripping", g, v)
		}
	}
	if string(req.Header.Peek("X-Keep")) != "2" || string(req.Header.ContentType()) != "application/json" {
		t.Errorf("end-to-end headers lost: %q", req.Header.String())
	}

	var resp fasthttp.Response
	raw = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\nX-Keep: 3\r\n\r\n0\r\nX-T: v\r\n\r\n"
	if err := resp.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	StripResponseHopByHop(&resp.Header)
	var out bytes.Buffer
	for k, v := range resp.Header.All() {
		out.WriteString(string(k) + ": " + string(v) + "\n")
	}
	for _, g := range []string{"Connection", "Transfer-Encoding", "Trailer"} {
		if strings.Contains(strings.ToLower(out.String()), strings.ToLower(g)+":") {
			t.Errorf("response keeps %s:\n%s", g, out.String())
		}
	}
	if string(resp.Header.Peek("X-Keep")) != "3" {
		t.Errorf("response lost X-Keep:\n%s", out.String())
	}

}

// TestStripHopByHopAllocs: stripping headers that hold no hop-by-hop one,
// the common case, allocates nothing.
func TestStripHopByHopAllocs(t *testing.T) {
	var clean fasthttp.RequestHeader
	clean.Set("Content-Type", "application/json")
	clean.Set("Mcp-Session-Id", "s")
	clean.Set("Authorization", "Bearer t")
	clean.Set("User-Agent", "ua")
	var cleanResp fasthttp.ResponseHeader
	cleanResp.Set("Content-Type", "application/json")
	cleanResp.Set("Cache-Control", "no-cache")
	if n := testing.AllocsPerRun(100, func() { StripRequestHopByHop(&clean); StripResponseHopByHop(&cleanResp) }); n != 0 {
		t.Errorf("stripping headers without hop-by-hop ones: %v allocs, want 0", n)
	}
}
