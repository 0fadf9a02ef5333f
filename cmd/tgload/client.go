package main

// The MCP Streamable HTTP client of one worker: targets, sessions
// (initialize, DELETE), one POST and its JSON or SSE answer, error kinds.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// target is one MCP endpoint.
type target struct {
	url string
	hc  *fasthttp.HostClient
}

func newTarget(raw string, conns int, timeout time.Duration) *target {
	u, _ := url.Parse(raw) // validated in parseFlags
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	return &target{url: raw, hc: &fasthttp.HostClient{
		Addr:                     host,
		IsTLS:                    u.Scheme == "https",
		MaxConns:                 conns,
		MaxConnWaitTimeout:       timeout,
		MaxIdleConnDuration:      time.Minute,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		ReadBufferSize:           16 << 10,
		MaxResponseBodySize:      64 << 20,
		NoDefaultUserAgentHeader: true,
	}}
}

// session is one MCP session on a target.
type session struct {
	t  *target
	id string // Mcp-Session-Id; empty for stateless servers
}

// rpcMsg is a JSON-RPC message as far as tgload looks at it.
type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *rpcErr         `json:"error"`
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// answer is the JSON-RPC answer to one request.
type answer struct {
	msg   rpcMsg
	notes int // other messages (notifications) seen before it on an SSE answer
	sse   bool
}

// loadErr is a failed request; kind names it in the error counts.
type loadErr struct {
	kind   string
	detail string
}

func (e *loadErr) Error() string { return e.kind + ": " + e.detail }

func errf(kind, format string, a ...any) *loadErr {
	return &loadErr{kind: kind, detail: fmt.Sprintf(format, a...)}
}

const acceptBoth = "application/json, text/event-stream"

// client holds one worker's reusable request state.
type client struct {
	cfg      *config
	wire2026 bool // the 2026-07-28 wire (--era 2026): no session, _meta and headers per request
	// mcpMethod and mcpName are the Mcp-Method and Mcp-Name headers of the
	// 2026 request being sent (rpc26).
	mcpMethod, mcpName string
	auth               string
	req                *fasthttp.Request
	resp               *fasthttp.Response
	buf                []byte
	id                 int64
}

func newClient(cfg *config, worker int) *client {
	c := &client{cfg: cfg, wire2026: cfg.era == era2026, req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
	if cfg.authPrefix != "" {
		c.auth = "Bearer " + cfg.authPrefix + strconv.Itoa(worker)
	}
	return c
}

func (c *client) nextID() int64 { c.id++; return c.id }

// post sends body (a request with id id, or a notification when id is 0)
// on s and returns its answer.
func (c *client) post(s *session, body []byte, id int64, accept string, initializing bool) (answer, error) {
	req, resp := c.req, c.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(s.t.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", accept)
	switch {
	case c.wire2026:
		req.Header.Set("MCP-Protocol-Version", era2026)
		req.Header.Set("Mcp-Method", c.mcpMethod)
		if c.mcpName != "" {
			req.Header.Set("Mcp-Name", c.mcpName)
		}
	case !initializing:
		req.Header.Set("MCP-Protocol-Version", c.cfg.protoVersion)
	}
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	req.SetBodyRaw(body)
	if err := s.t.hc.DoTimeout(req, resp, c.cfg.timeout); err != nil {
		kind := "transport"
		if errors.Is(err, fasthttp.ErrTimeout) {
			kind = "timeout"
		}
		return answer{}, errf(kind, "%v", err)
	}
	status := resp.StatusCode()
	if id == 0 {
		if status != fasthttp.StatusAccepted && status != fasthttp.StatusOK {
			return answer{}, errf("http-"+strconv.Itoa(status), "notification: %.200s", resp.Body())
		}
		return answer{}, nil
	}
	if status != fasthttp.StatusOK {
		return answer{}, errf("http-"+strconv.Itoa(status), "%.200s", resp.Body())
	}
	ct := resp.Header.ContentType()
	if bytes.HasPrefix(ct, []byte("text/event-stream")) {
		return parseSSE(resp.Body(), id)
	}
	var a answer
	if err := json.Unmarshal(resp.Body(), &a.msg); err != nil {
		return answer{}, errf("bad-json", "%v: %.200s", err, resp.Body())
	}
	if !idIs(a.msg.ID, id) {
		return answer{}, errf("bad-id", "want id %d, got %s", id, a.msg.ID)
	}
	return a, nil
}

func idIs(raw json.RawMessage, id int64) bool {
	var buf [24]byte
	return bytes.Equal(bytes.TrimSpace(raw), strconv.AppendInt(buf[:0], id, 10))
}

// parseSSE finds the answer to id in an SSE body, counting the other
// messages before it.
func parseSSE(body []byte, id int64) (answer, error) {
	a := answer{sse: true}
	var data []byte
	dispatch := func() (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		var m rpcMsg
		if err := json.Unmarshal(data, &m); err != nil {
			return false, errf("bad-json", "SSE data: %v: %.200s", err, data)
		}
		data = data[:0]
		if (m.Result != nil || m.Error != nil) && idIs(m.ID, id) {
			a.msg = m
			return true, nil
		}
		a.notes++
		return false, nil
	}
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			if done, err := dispatch(); done || err != nil {
				return a, err
			}
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if done, err := dispatch(); done || err != nil {
		return a, err
	}
	return a, errf("no-answer", "SSE answer ended without the response to id %d", id)
}

// rpc sends a request and fails on a JSON-RPC error.
func (c *client) rpc(s *session, body []byte, id int64, accept string) (answer, error) {
	a, err := c.post(s, body, id, accept, false)
	if err != nil {
		return a, err
	}
	if a.msg.Error != nil {
		return a, errf("rpc"+strconv.Itoa(a.msg.Error.Code), "%s", a.msg.Error.Message)
	}
	if a.msg.Result == nil {
		return a, errf("no-result", "answer without result")
	}
	return a, nil
}

// initialize opens a session on t. The 2026 wire has none: its "session"
// is just the target.
func (c *client) initialize(t *target) (*session, error) {
	s := &session{t: t}
	if c.wire2026 {
		return s, nil
	}
	id := c.nextID()
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"tgload","version":"1"}}}`,
		id, c.cfg.protoVersion)
	a, err := c.post(s, body, id, acceptBoth, true)
	if err != nil {
		return nil, fmt.Errorf("initialize %s: %w", t.url, err)
	}
	if a.msg.Error != nil {
		return nil, fmt.Errorf("initialize %s: error %d %s", t.url, a.msg.Error.Code, a.msg.Error.Message)
	}
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(a.msg.Result, &r); err != nil || r.ProtocolVersion != c.cfg.protoVersion {
		return nil, fmt.Errorf("initialize %s: protocolVersion %q, want %q", t.url, r.ProtocolVersion, c.cfg.protoVersion)
	}
	s.id = string(c.resp.Header.Peek("Mcp-Session-Id"))
	if _, err := c.post(s, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), 0, acceptBoth, false); err != nil {
		return nil, fmt.Errorf("notifications/initialized %s: %w", t.url, err)
	}
	return s, nil
}

// closeSession ends a session (DELETE), ignoring the outcome.
func (c *client) closeSession(s *session) {
	if s.id == "" {
		return
	}
	req, resp := c.req, c.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(s.t.url)
	req.Header.SetMethod(fasthttp.MethodDelete)
	req.Header.Set("Mcp-Session-Id", s.id)
	req.Header.Set("MCP-Protocol-Version", c.cfg.protoVersion)
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	_ = s.t.hc.DoTimeout(req, resp, 5*time.Second)
}
