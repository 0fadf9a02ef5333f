package upstream

import (
	"context"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// newTestClient serves handler on an in-memory listener and returns a
// Client that reaches it through Options.Dial.
func newTestClient(t *testing.T, handler fasthttp.RequestHandler) *Client {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: handler}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	u, err := url.Parse("http://upstream.test/mcp")
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{URL: u, Dial: func(context.Context) (net.Conn, error) { return ln.Dial() },
		DialTimeout: time.Second, IdleConn: time.Minute, StreamIdleTimeout: 10 * time.Second, StreamMaxLifetime: time.Minute})
	t.Cleanup(func() {
		c.Close()
		_ = srv.Shutdown()
		_ = ln.Close()
		<-served
	})
	return c
}

// TestClientExchanges: a background call read to its end returns its
// connection to the pool and the next call reuses it; Post reports the
// answer's status; Ping dials through Options.Dial; NewRequest addresses
// the MCP endpoint.
func TestClientExchanges(t *testing.T) {
	conns := 0
	c := newTestClient(t, func(rc *fasthttp.RequestCtx) {
		if rc.ConnRequestNum() == 1 {
			conns++ // the server runs one connection's requests in order
		}
		if string(rc.Path()) != "/mcp" || string(rc.Host()) != "upstream.test" {
			rc.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		if string(rc.PostBody()) == "note" {
			rc.SetStatusCode(fasthttp.StatusAccepted)
			return
		}
		rc.SetContentType("application/json")
		rc.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	})
	if string(c.Path()) != "/mcp" {
		t.Fatalf("Path = %q", c.Path())
	}
	for i := range 2 {
		req := fasthttp.AcquireRequest()
		c.NewRequest(req, nil)
		req.SetBodyString(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		x, err := c.RoundTrip(context.Background(), req)
		fasthttp.ReleaseRequest(req)
		if err != nil {
			t.Fatalf("RoundTrip %d: %v", i, err)
		}
		body, err := io.ReadAll(x.Resp.BodyStream())
		if err != nil || x.Resp.StatusCode() != 200 || string(body) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
			t.Fatalf("RoundTrip %d: %d %q %v", i, x.Resp.StatusCode(), body, err)
		}
		x.SetReusable(true)
		x.Done()
		if _, bg := c.IdleConns(); bg != 1 {
			t.Fatalf("after call %d: %d idle background connections, want 1", i, bg)
		}
	}
	if conns != 1 {
		t.Errorf("two calls used %d connections, want 1 (the pooled one reused)", conns)
	}
	var hdr fasthttp.RequestHeader
	hdr.SetMethod(fasthttp.MethodPost)
	hdr.SetRequestURI("/mcp")
	hdr.SetHost("upstream.test")
	if status, err := c.Post(&hdr, []byte("note"), 5*time.Second); err != nil || status != fasthttp.StatusAccepted {
		t.Errorf("Post = %d, %v; want 202", status, err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// TestPostTimeoutBoundsASilentUpstream: Post, Delete and DeleteSession
// give up at their timeout when the upstream takes the request and never
// answers; the connection's idle bound (10 s here, 10 min by default) must
// not stand in for it.
func TestPostTimeoutBoundsASilentUpstream(t *testing.T) {
	release := make(chan struct{})
	c := newTestClient(t, func(rc *fasthttp.RequestCtx) { <-release })
	defer close(release)
	var hdr fasthttp.RequestHeader
	hdr.SetMethod(fasthttp.MethodPost)
	hdr.SetRequestURI("/mcp")
	hdr.SetHost("upstream.test")
	calls := map[string]func() error{
		"Post":          func() error { _, err := c.Post(&hdr, []byte("{}"), 100*time.Millisecond); return err },
		"Delete":        func() error { _, err := c.Delete(&hdr, 100*time.Millisecond); return err },
		"DeleteSession": func() error { return c.DeleteSession("s1", "2025-11-25", 100*time.Millisecond) },
	}
	for name, call := range calls {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: no error from an upstream that never answered", name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still waiting 5 s after its 100 ms timeout", name)
		}
	}
}
