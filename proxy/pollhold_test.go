package proxy

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/taskstore"
)

// A tasks/get of a working task whose call runs here is held until the
// call ends, on both wires, and answers the end (the completed task, with
// the result inline on the 2026 wire); the task is old enough (its store's
// clock runs a minute behind) that its delay bound is 3 s and its hold
// 5 s, and the young-call hold does not apply. Answered at once, the get
// would say working.
func TestTaskGetHeldUntilTheEnd(t *testing.T) {
	st, closer, err := taskstore.NewEmbedded(taskstore.Config{Now: func() time.Time { return time.Now().Add(-time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closer)
	started, release, done := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		if bytes.Contains(rc.PostBody(), []byte(`"tools/call"`)) {
			started <- struct{}{}
			select {
			case <-release:
			case <-done:
			}
		}
		rc.SetContentType("application/json")
		rc.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}`)
	}, withStore(st), withConfig(func(c *Config) { c.TaskRate, c.PromoteWindow = -1, time.Millisecond }))
	t.Cleanup(func() { close(done) }) // runs first: blocked upstream calls return
	taskID := regexp.MustCompile(`"taskId":"([^"]+)"`)
	const tasksCaps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
	for _, era := range []struct {
		name   string
		create *fasthttp.Request
		get    func(id string) *fasthttp.Request
		want   []string
	}{
		{
			name: "2025-11-25",
			create: newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"task":{}}}`,
				"Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer hold"),
			get: func(id string) *fasthttp.Request {
				return newPost(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`,
					"Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer hold")
			},
			want: []string{`"status":"completed"`},
		},
		{
			name:   "2026-07-28",
			create: post2026("tools/call", `{"name":"echo","arguments":{}}`, tasksCaps, "echo", "Authorization", "Bearer hold"),
			get: func(id string) *fasthttp.Request {
				return post2026("tasks/get", `{"taskId":"`+id+`"}`, tasksCaps, id, "Authorization", "Bearer hold")
			},
			want: []string{`"status":"completed"`, `"text":"done"`},
		},
	} {
		t.Run(era.name, func(t *testing.T) {
			body := string(tp.do(era.create).Body())
			m := taskID.FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("create: %s", body)
			}
			<-started
			type answer struct {
				body string
				dur  time.Duration
			}
			got := make(chan answer, 1)
			go func() {
				start := time.Now()
				b := string(tp.do(era.get(m[1])).Body())
				got <- answer{b, time.Since(start)}
			}()
			pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(tp.h.m.inflight) == 1 }, "tasks/get to be held")
			release <- struct{}{}
			a := <-got
			for _, w := range era.want {
				if !strings.Contains(a.body, w) {
					t.Fatalf("held tasks/get = %s, want %s", a.body, w)
				}
			}
			if a.dur >= 3*time.Second {
				t.Errorf("held tasks/get took %v: the end did not end the hold", a.dur)
			}
		})
	}
}
