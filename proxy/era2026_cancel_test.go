package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/policy"
	v20260728 "github.com/taskgate/taskgate/proxy/wire/v20260728"
)

// cancelNote is a 2026 client's notifications/cancelled as the official Go
// SDK (v1.8.0) sends it: the 2026 headers, no params._meta.
func cancelNote(reqID string, headers ...string) *fasthttp.Request {
	h := append([]string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "notifications/cancelled"}, headers...)
	return newPost(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+reqID+`,"reason":"context canceled"}}`, h...)
}

// A 2026 client's notifications/cancelled (without _meta, in its own POST)
// is accepted with 202 and stops the plain call it names upstream, whether
// the bridge sends the call in an upstream session (with or without
// credentials) or runs it as a task the client never sees (a request that
// declares elicitation).
func TestCancelledPlainCall2026(t *testing.T) {
	for _, tc := range []struct {
		name, caps string
		who        []string
	}{
		{"bridged anonymous", `{}`, nil},
		{"bridged with credentials", `{}`, []string{"Authorization", "Bearer alice-token"}},
		{"held as a hidden task", `{"elicitation":{}}`, []string{"Authorization", "Bearer alice-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTaskEnv(t, "", Config{})
			answered := make(chan *fasthttp.Response, 1)
			go func() {
				resp := new(fasthttp.Response)
				_ = e.c.DoTimeout(post2026("tools/call", `{"name":"block","arguments":{}}`, tc.caps, "block", tc.who...), resp, 20*time.Second)
				answered <- resp
			}()
			waitFor(t, 5*time.Second, "the call upstream", func() bool { return e.up.toolCalls() == 1 })

			// A cancellation naming another request, or sent by another
			// caller, stops nothing.
			other := append([]string(nil), tc.who...)
			if len(other) == 0 {
				other = []string{"Authorization", "Bearer mallory"}
			} else {
				other = nil
			}
			for _, req := range []*fasthttp.Request{cancelNote("8", tc.who...), cancelNote("7", other...)} {
				resp := new(fasthttp.Response)
				if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode() != fasthttp.StatusAccepted {
					t.Fatalf("notifications/cancelled: HTTP %d %s, want 202", resp.StatusCode(), resp.Body())
				}
			}
			if n := e.h.eras[0].(*v20260728.Wire).InFlight(); n != 1 {
				t.Fatalf("%d calls tracked, want 1", n)
			}

			resp := new(fasthttp.Response)
			if err := e.c.DoTimeout(cancelNote("7", tc.who...), resp, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode() != fasthttp.StatusAccepted {
				t.Fatalf("notifications/cancelled: HTTP %d %s, want 202", resp.StatusCode(), resp.Body())
			}
			waitFor(t, 5*time.Second, "notifications/cancelled upstream", func() bool {
				_, cancelled, _ := e.up.snapshot()
				return len(cancelled) == 1
			})
			select {
			case r := <-answered:
				if !strings.Contains(string(r.Body()), `"error"`) {
					t.Errorf("the cancelled call's answer: HTTP %d %s, want an error", r.StatusCode(), r.Body())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the cancelled call got no answer")
			}
			waitFor(t, 5*time.Second, "the call untracked", func() bool { return e.h.eras[0].(*v20260728.Wire).InFlight() == 0 })
		})
	}
}

// A 2026 client abandons a plain call by closing its request; passed
// through to a 2026 upstream, the call's upstream connection closes too,
// also while the upstream has not answered yet (no header): that is how the
// upstream learns the request was abandoned.
func TestPassThroughClientLeaves2026(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	called := make(chan struct{}, 1)
	closed := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					if !strings.Contains(string(body), `"tools/call"`) {
						res := `{"jsonrpc":"2.0","id":"taskgate-probe","result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}}`
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(res), res)
						continue
					}
					called <- struct{}{}
					// No answer: wait for the proxy to close the connection.
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, err := br.ReadByte(); errors.Is(err, io.EOF) {
						closed <- struct{}{}
					}
					return
				}
			}(c)
		}
	}()
	tp := newTestProxy(t, nil, withTCP(), withUpstreamURL("http://"+ln.Addr().String()+"/mcp"))
	c, _ := tp.rawConn()
	req := post2026("tools/call", `{"name":"slow","arguments":{}}`, `{}`, "slow")
	req.SetHost("gw.test")
	if _, err := req.WriteTo(c); err != nil {
		t.Fatal(err)
	}
	select {
	case <-called:
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not reach the upstream")
	}
	_ = c.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the client left, but the upstream connection of its call stayed open")
	}
}

// Under the policy's ownTasks, a 2026 upstream that offers the tasks
// extension itself is treated like one without tasks: server/discover shows
// taskgate's extension (not the upstream's settings), a task call becomes a
// task of taskgate's, and the upstream gets it as a plain call (the
// extension removed from the request's client capabilities). Without
// ownTasks everything passes through.
func TestOwnTasksNativeUpstream2026(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprintf("ownTasks=%v", own), func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			up := func(rc *fasthttp.RequestCtx) {
				var msg struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				_ = json.Unmarshal(rc.PostBody(), &msg)
				rc.SetContentType("application/json")
				switch msg.Method {
				case "server/discover":
					rc.SetBodyString(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],` +
						`"capabilities":{"tools":{},"extensions":{"io.modelcontextprotocol/tasks":{"upstream":true}}},"serverInfo":{"name":"native","version":"1"}}}`)
				case "tools/call":
					mu.Lock()
					calls = append(calls, string(rc.PostBody()))
					mu.Unlock()
					// A tool that takes a while: answered at once, the call
					// could still end inside the 1 ns promote window on a
					// loaded machine (CI saw its result returned directly).
					time.Sleep(200 * time.Millisecond)
					rc.SetBodyString(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":{"resultType":"complete","content":[{"type":"text","text":"hi"}]}}`)
				default:
					rc.SetBodyString(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":{"resultType":"complete"}}`)
				}
			}
			pol, err := policy.Parse([]byte(fmt.Sprintf("ownTasks: %v\ndefaults:\n  taskSupport: optional\n", own)), "test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			tp := newTestProxy(t, up, withPolicy(pol), withConfig(func(c *Config) { c.PromoteWindow = time.Nanosecond; c.TaskRate = -1 }))
			const caps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
			auth := []string{"Authorization", "Bearer alice"}

			disc := string(tp.do(post2026("server/discover", "", caps, "", auth...)).Body())
			if own != !strings.Contains(disc, `"upstream":true`) || !strings.Contains(disc, `"io.modelcontextprotocol/tasks"`) {
				t.Errorf("server/discover = %s, want the tasks extension, the upstream's own settings only without ownTasks", disc)
			}

			resp := tp.do(post2026("tools/call", `{"name":"hello","arguments":{}}`, caps, "hello", auth...))
			var res struct {
				Result struct {
					ResultType string `json:"resultType"`
					TaskID     string `json:"taskId"`
				} `json:"result"`
			}
			body := resp.Body()
			if i := strings.LastIndex(string(body), "data: "); i >= 0 {
				body = body[i+len("data: "):]
			}
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatalf("tools/call answer %s: %v", resp.Body(), err)
			}
			var got []string
			waitFor(t, 5*time.Second, "the call upstream", func() bool {
				mu.Lock()
				defer mu.Unlock()
				got = append([]string(nil), calls...)
				return len(got) == 1
			})
			hidden := !strings.Contains(got[0], "io.modelcontextprotocol/tasks")
			if !own {
				if res.Result.TaskID != "" || hidden {
					t.Errorf("without ownTasks: answer %s, upstream got %s; want the call passed through as it was", resp.Body(), got[0])
				}
				return
			}
			if res.Result.ResultType != "task" || res.Result.TaskID == "" {
				t.Fatalf("tools/call = %s, want taskgate's CreateTaskResult", resp.Body())
			}
			if !hidden {
				t.Errorf("the upstream got %s, want the call without the tasks extension", got[0])
			}
			waitFor(t, 5*time.Second, "the task in taskgate's store", func() bool {
				get := string(tp.do(post2026("tasks/get", `{"taskId":"`+res.Result.TaskID+`"}`, caps, res.Result.TaskID, auth...)).Body())
				return strings.Contains(get, `"completed"`) && strings.Contains(get, `"hi"`)
			})
		})
	}
}

// TestUndeclaredInput2026: a 2025 upstream that asks a plain 2026 call
// for input the request did not declare (it ignores the capabilities its
// bridged session declared, which are the request's) gets no answer: the
// client gets 400/-32021 naming the capability, and the upstream is told
// to stop the call (M-31).
func TestUndeclaredInput2026(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	resp := new(fasthttp.Response)
	if err := e.c.DoTimeout(post2026("tools/call", `{"name":"asker","arguments":{}}`, `{}`, "asker", "Authorization", "Bearer alice-token"), resp, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusBadRequest || !strings.Contains(string(resp.Body()), `"code":-32021`) ||
		!strings.Contains(string(resp.Body()), `{"requiredCapabilities":{"elicitation":{}}}`) {
		t.Fatalf("tools/call = HTTP %d %s, want 400 and -32021 naming elicitation", resp.StatusCode(), resp.Body())
	}
	waitFor(t, 5*time.Second, "notifications/cancelled upstream", func() bool {
		_, cancelled, _ := e.up.snapshot()
		return len(cancelled) == 1
	})
}
