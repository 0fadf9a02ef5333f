package proxy

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy/wire"
)

// A tasks/result whose stream ends with a JSON-RPC error is counted with
// outcome rpc_error when it ends, not ok when its headers went out; one
// ending with a result counts ok. Task metrics carry the policy rule as
// the tool label.
func TestStreamedResultCountedAtItsEnd(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	for _, tc := range []struct {
		tool, want string
	}{
		{"rpcerr", "rpc_error"},
		{"echo", "ok"},
	} {
		task := e.createTask(alice, tc.tool, `{"text":"x"}`, `{}`)
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"tasks/result","params":{"taskId":%q}}`, task.TaskID)
		before := testutil.ToFloat64(e.h.m.requests.WithLabelValues(wire.MethodTasksResult, tc.want))
		e.send(alice, body, "text/event-stream") // streamed while the task runs, else JSON
		pollUntil(t, 5*time.Second, func() bool {
			return testutil.ToFloat64(e.h.m.requests.WithLabelValues(wire.MethodTasksResult, tc.want)) == before+1
		}, "the %s tasks/result counted as %s", tc.tool, tc.want)
	}
	// echo has a rule of its own; rpcerr matches none.
	if n := testutil.ToFloat64(e.h.m.tasks.WithLabelValues("created", "echo")); n != 1 {
		t.Errorf("created{tool=echo} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(e.h.m.tasks.WithLabelValues("created", "other")); n != 1 {
		t.Errorf("created{tool=other} = %v, want 1 (rpcerr is named by no rule)", n)
	}
	if n := testutil.CollectAndCount(e.h.m.taskDur); n != 2 {
		t.Errorf("task duration series = %d, want 2 (echo completed, other failed)", n)
	}
}

// A passed-through stream is logged once, when it ends, with its real
// outcome (the client left) and its whole duration in dur_ms.
func TestStreamLoggedAtItsEnd(t *testing.T) {
	up := newStreamingUpstream(t)
	var logs lockedBuffer
	tp := newTestProxy(t, nil, withTCP(), withUpstreamURL(up.url()), withLogger(zerolog.New(&logs)))
	c, err := tp.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /mcp HTTP/1.1\r\nHost: gw\r\nAccept: text/event-stream\r\nMcp-Session-Id: s1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(l, "notifications/message") {
			break
		}
	}
	if strings.Contains(logs.String(), `"message":"request"`) {
		t.Fatalf("the stream was logged before it ended:\n%s", logs.String())
	}
	c.Close()
	pollUntil(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), `"message":"request"`) }, "the request log line")
	line := logs.String()
	for _, want := range []string{`"outcome":"client_gone"`, `"dur_ms":`, `"ttfb_ms":`, `"http_method":"GET"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s:\n%s", want, line)
		}
	}
	if n := strings.Count(line, `"message":"request"`); n != 1 {
		t.Errorf("%d request lines, want 1", n)
	}
}

// Every metric has a HELP text, and each label value emitted for a
// lifecycle event or task outcome is named in its metric's HELP.
func TestMetricsHelpMatchesEmitted(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	e.waitStatus(alice, e.createTask(alice, "echo", `{"text":"x"}`, `{}`).TaskID, "completed")
	e.waitStatus(alice, e.createTask(alice, "fail", `{}`, `{}`).TaskID, "failed")
	blocked := e.createTask(alice, "block", `{}`, `{}`)
	e.call(alice, 3, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, blocked.TaskID))
	e.call(alice, 4, "tasks/get", `{"taskId":"nope"}`)
	e.call(alice, 5, "tools/call", `{"name":"forbidden_x","arguments":{},"task":{}}`)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.h.m.collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", f.GetName())
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "event" || (f.GetName() == "taskgate_task_duration_seconds" && l.GetName() == "outcome")) &&
					!strings.Contains(f.GetHelp(), l.GetValue()) {
					t.Errorf("%s emits %s=%q, which its HELP does not name: %q", f.GetName(), l.GetName(), l.GetValue(), f.GetHelp())
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no labelled series emitted")
	}
	for _, name := range []string{"taskgate_build_info", "taskgate_task_duration_seconds", "taskgate_task_upstream_call_seconds",
		"taskgate_tasks_total", "taskgate_store_op_duration_seconds"} {
		found := false
		for _, f := range fams {
			found = found || f.GetName() == name
		}
		if !found {
			t.Errorf("%s not emitted", name)
		}
	}
}

// Counters an alert watches exist at 0 from the start (increase() misses
// the first increment of a series that appears with it), and the build
// version is the one the command passes.
func TestMetricsPresentAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.SetBuildVersion("v9.9.9-test")
	want := map[string]bool{
		`taskgate_store_errors_total{op="create"}`:                                         false,
		`taskgate_store_errors_total{op="renew"}`:                                          false,
		`taskgate_requests_total{method="tools/call",outcome="upstream_unreachable"}`:      false,
		`taskgate_requests_total{method="tasks/result",outcome="store_unavailable"}`:       false,
		`taskgate_tasks_total{event="failed",tool="other"}`:                                false,
		`taskgate_tasks_total{event="lost",tool="other"}`:                                  false,
		`taskgate_build_info{goversion="` + runtime.Version() + `",version="v9.9.9-test"}`: false,
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	builds := 0
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			if _, ok := want[key]; ok {
				want[key] = true
			}
			if f.GetName() == "taskgate_build_info" {
				builds++
			}
		}
	}
	for k, found := range want {
		if !found {
			t.Errorf("%s not present at start", k)
		}
	}
	if builds != 1 {
		t.Errorf("taskgate_build_info has %d series, want 1", builds)
	}
}
