package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// fakeUpstream is a scripted MCP server on loopback TCP (the runner dials
// real TCP). Tools:
//
//	echo {text}      JSON result at once
//	block            SSE answer that blocks until release() or until the
//	                 proxy drops the connection (recorded as aborted)
//	fail             isError result
//	rpcerr           JSON-RPC error with data
//	progress         SSE: a progress notification, then the result
//	drop             SSE: an event with id "e1" and retry 10, then the
//	                 connection closes; GET with Last-Event-ID e1 delivers
//	                 the result
//	status404        HTTP 404
//	big {bytes}      JSON result with a text of that many bytes
type fakeUpstream struct {
	t      *testing.T
	addr   string
	scheme string // http or https
	srv    *fasthttp.Server

	mu        sync.Mutex
	requests  []fakeRequest // every POST body with its headers
	cancelled []string      // requestIds of notifications/cancelled
	aborted   int           // block answers whose connection the proxy closed
	release   chan struct{}
	dropID    string
	answers   chan string // results of client answers to the asker's elicitation
	// getEvents, when set, makes GET (without Last-Event-ID) a standalone
	// SSE stream that writes each message sent here as an event, until
	// release.
	getEvents chan string
}

type fakeRequest struct {
	method     string // JSON-RPC method
	body       string
	headers    map[string]string
	httpGet    bool
	httpDelete bool
}

func newFakeUpstream(t *testing.T) *fakeUpstream { return newFakeUpstreamTLS(t, nil) }

// newFakeUpstreamTLS serves over TLS with cert (nil: plain HTTP).
func newFakeUpstreamTLS(t *testing.T, cert *tls.Certificate) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{t: t, addr: ln.Addr().String(), scheme: "http", release: make(chan struct{}), answers: make(chan string, 16)}
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}})
		u.scheme = "https"
	}
	u.srv = &fasthttp.Server{Handler: u.serve, CloseOnShutdown: true}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() {
		u.releaseAll()
		_ = u.srv.Shutdown()
	})
	return u
}

func (u *fakeUpstream) url() string { return u.scheme + "://" + u.addr + "/mcp" }

func (u *fakeUpstream) releaseAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

func (u *fakeUpstream) snapshot() (reqs []fakeRequest, cancelled []string, aborted int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]fakeRequest(nil), u.requests...), append([]string(nil), u.cancelled...), u.aborted
}

// toolCalls counts the tools/call requests the upstream received.
func (u *fakeUpstream) toolCalls() int {
	reqs, _, _ := u.snapshot()
	n := 0
	for _, r := range reqs {
		if r.method == "tools/call" {
			n++
		}
	}
	return n
}

func (u *fakeUpstream) serve(rc *fasthttp.RequestCtx) {
	hdr := map[string]string{}
	for _, k := range []string{"Mcp-Session-Id", "Authorization", "Mcp-Protocol-Version", "Last-Event-Id", "X-Custom", "Traceparent"} {
		if v := rc.Request.Header.Peek(k); len(v) > 0 {
			hdr[k] = string(v)
		}
	}
	if rc.IsDelete() {
		u.mu.Lock()
		u.requests = append(u.requests, fakeRequest{headers: hdr, httpDelete: true})
		u.mu.Unlock()
		rc.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if rc.IsGet() {
		u.mu.Lock()
		u.requests = append(u.requests, fakeRequest{headers: hdr, httpGet: true})
		u.mu.Unlock()
		if hdr["Last-Event-Id"] == "e1" {
			rc.Response.Header.SetContentType("text/event-stream")
			id := u.lastDropID()
			rc.SetBodyString("id: e2\ndata: " + `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"resumed"}]}}` + "\n\n")
			return
		}
		if u.getEvents != nil {
			rc.Response.Header.SetContentType("text/event-stream")
			events, release := u.getEvents, u.release
			rc.SetBodyStreamWriter(func(w *bufio.Writer) {
				_, _ = w.WriteString(": open\n\n")
				_ = w.Flush()
				for {
					select {
					case m := <-events:
						fmt.Fprintf(w, "data: %s\n\n", m)
						if w.Flush() != nil {
							return
						}
					case <-release:
						return
					}
				}
			})
			return
		}
		rc.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Params struct {
			Name      string          `json:"name"`
			RequestID json.RawMessage `json:"requestId"`
			Arguments struct {
				Text  string `json:"text"`
				Bytes int    `json:"bytes"`
			} `json:"arguments"`
		} `json:"params"`
	}
	body := append([]byte(nil), rc.PostBody()...)
	if err := json.Unmarshal(body, &msg); err != nil {
		rc.SetStatusCode(fasthttp.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.requests = append(u.requests, fakeRequest{method: msg.Method, body: string(body), headers: hdr})
	if msg.Method == "notifications/cancelled" {
		u.cancelled = append(u.cancelled, string(msg.Params.RequestID))
	}
	u.mu.Unlock()
	if msg.ID == nil {
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	if msg.Method == "" { // a client's answer to one of our requests
		u.answers <- string(msg.Result)
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	id := string(msg.ID)
	jsonAnswer := func(s string) {
		rc.Response.Header.SetContentType("application/json")
		rc.SetBodyString(s)
	}
	if msg.Method == "initialize" {
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}`)
		return
	}
	if msg.Method != "tools/call" {
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"result":{}}`)
		return
	}
	switch msg.Params.Name {
	case "echo":
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":` + quote(msg.Params.Arguments.Text) + `}],"structuredContent":{"n":1}}}`)
	case "fail":
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"quota exceeded"}],"isError":true}}`)
	case "rpcerr":
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32042,"message":"URL elicitation required","data":{"elicitations":[{"mode":"url","url":"https://example.test/x"}]}}}`)
	case "status404":
		rc.SetStatusCode(fasthttp.StatusNotFound)
		rc.SetBodyString("session not found")
	case "big":
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", msg.Params.Arguments.Bytes) + `"}]}}`)
	case "progress":
		rc.Response.Header.SetContentType("text/event-stream")
		rc.SetBodyString("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1,\"total\":2}}\n\n" +
			"data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"ping\"}\n\n" +
			"data: {\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n")
	case "drop":
		u.mu.Lock()
		u.dropID = id
		u.mu.Unlock()
		rc.Response.Header.SetContentType("text/event-stream")
		rc.SetConnectionClose()
		rc.SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprint(w, "id: e1\nretry: 10\ndata: \n\n")
			_ = w.Flush()
			// returning ends the response without the result
		})
	case "asker":
		// progress, an elicitation request, then (after the client's
		// answer reached us) more progress and the result.
		rc.Response.Header.SetContentType("text/event-stream")
		answers, release := u.answers, u.release
		rc.SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p-7\",\"progress\":1,\"total\":3,\"message\":\"step 1 of 3\"}}\n\n")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"asking\"}}\n\n")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-e1\",\"method\":\"elicitation/create\",\"params\":{\"message\":\"name?\",\"requestedSchema\":{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"string\"}}}}}\n\n")
			_ = w.Flush()
			var answer string
			select {
			case answer = <-answers:
			case <-release:
				return
			}
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p-7\",\"progress\":2,\"total\":3}}\n\n")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":"+id+",\"result\":{\"content\":[{\"type\":\"text\",\"text\":"+quote("you said "+answer)+"}]}}\n\n")
			_ = w.Flush()
		})
	case "block":
		rc.Response.Header.SetContentType("text/event-stream")
		release := u.release
		rc.SetBodyStreamWriter(func(w *bufio.Writer) {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-release:
					fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":"+id+",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"released\"}]}}\n\n")
					_ = w.Flush()
					return
				case <-tick.C:
					if _, err := w.WriteString(": tick\n\n"); err != nil || w.Flush() != nil {
						u.mu.Lock()
						u.aborted++
						u.mu.Unlock()
						return
					}
				}
			}
		})
	default:
		jsonAnswer(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32602,"message":"unknown tool"}}`)
	}
}

// gotAnswer reports whether a client's response with the raw id reached
// the upstream.
func (u *fakeUpstream) gotAnswer(id string) bool {
	reqs, _, _ := u.snapshot()
	for _, r := range reqs {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if r.method == "" && json.Unmarshal([]byte(r.body), &m) == nil && string(m.ID) == id {
			return true
		}
	}
	return false
}

func (u *fakeUpstream) lastDropID() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dropID
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// callID returns the raw JSON-RPC id of the (last) tools/call of tool.
func (u *fakeUpstream) callID(tool string) string {
	reqs, _, _ := u.snapshot()
	id := ""
	for _, r := range reqs {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if r.method == "tools/call" && json.Unmarshal([]byte(r.body), &m) == nil && m.Params.Name == tool {
			id = string(m.ID)
		}
	}
	return id
}
