package wire

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestJobHeaderCopy: Begin keeps the call's request headers as bytes that
// outlive the request, and Header parses them back whole, for the
// messages sent beside the call (answers, resumes, the session's end).
func TestJobHeaderCopy(t *testing.T) {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/mcp?x=1")
	req.Header.SetHost("upstream.internal:3000")
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer secret-token")
	req.Header.Set("Mcp-Session-Id", "sess-42")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	req.SetBodyString(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)

	j := &Job{Req: req}
	j.Job.Call = j
	(&Runner{}).Begin(&j.Job)
	want := map[string]string{}
	req.Header.VisitAll(func(k, v []byte) { want[string(k)] += string(v) + ";" })
	req.Header.Set("Mcp-Session-Id", "changed") // the request is reused once written
	fasthttp.ReleaseRequest(req)
	j.Req = nil

	var got fasthttp.RequestHeader
	if err := j.Header(&got); err != nil {
		t.Fatal(err)
	}
	if m := string(got.Method()); m != fasthttp.MethodPost {
		t.Errorf("method %q", m)
	}
	if u := string(got.RequestURI()); u != "/mcp?x=1" {
		t.Errorf("request URI %q", u)
	}
	have := map[string]string{}
	got.VisitAll(func(k, v []byte) { have[string(k)] += string(v) + ";" })
	for k, v := range want {
		if have[k] != v {
			t.Errorf("header %s: got %q, want %q", k, have[k], v)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			t.Errorf("header %s added: %q", k, have[k])
		}
	}

	j.Hdr = j.Hdr[:len(j.Hdr)-2] // no blank line: not a header block
	if err := j.Header(&got); err == nil {
		t.Error("a cut header copy parsed without error")
	}
}
