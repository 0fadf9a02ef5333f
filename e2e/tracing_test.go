package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/e2e/e2etest"
)

// The OpenTelemetry e2e test runs a real Collector, built from its Go
// modules (e2e/otelcol, its own module: the OTLP receiver and the file
// exporter, pinned in e2e/otelcol/go.mod), on free loopback ports, and
// taskgate configured only by OTEL_* variables sending to it, in front of
// legacy-mcp. It reads the spans back from the Collector's file.

// The client's trace context.
const (
	e2eTraceID = "0af7651916cd43dd8448eb211c80319c"
	e2eSpanID  = "b7ad6b7169203331"
)

var (
	otelcolOnce sync.Once
	otelcolBin  string
	otelcolErr  error
)

// buildCollector builds e2e/otelcol once per test binary (the Go build
// cache keeps later builds short; .ci/run warms it).
func buildCollector(t *testing.T) string {
	t.Helper()
	otelcolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "taskgate-otelcol-")
		if err != nil {
			otelcolErr = err
			return
		}
		bin := filepath.Join(dir, "otelcol")
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = "otelcol"
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			otelcolErr = fmt.Errorf("building the Collector: %v\n%s", err, out.String())
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: built the OpenTelemetry Collector in %s\n", time.Since(start).Round(time.Millisecond))
		otelcolBin = bin
	})
	if otelcolErr != nil {
		t.Fatal(otelcolErr)
	}
	return otelcolBin
}

// collector is a running Collector writing the traces it receives to file.
type collector struct {
	grpc, http string // host:port of the OTLP receivers
	file       string
}

// startCollector starts the Collector on free loopback ports and waits
// until both receivers accept connections.
func startCollector(t *testing.T) *collector {
	t.Helper()
	bin := buildCollector(t)
	dir := t.TempDir()
	c := &collector{file: filepath.Join(dir, "traces.jsonl")}
	e2etest.StartRetrying(t, func() (*proc, error) {
		c.grpc, c.http = e2etest.FreeAddr(t), e2etest.FreeAddr(t)
		cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, c.grpc, c.http, c.file)
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startProc(t, "otelcol", bin, "--config", path)
		err := e2etest.PollUntil(30*time.Second, func() (bool, error) {
			if p.Exited() {
				return false, fmt.Errorf("otelcol exited early: %s", p.Output())
			}
			for _, a := range []string{c.grpc, c.http} {
				conn, err := net.DialTimeout("tcp", a, time.Second)
				if err != nil {
					return false, nil
				}
				conn.Close()
			}
			return true, nil
		})
		if err != nil {
			p.Kill()
		}
		return p, err
	})
	return c
}

// otlpSpan is a span as the file exporter writes it (OTLP JSON).
type otlpSpan struct {
	TraceID      string     `json:"traceId"`
	SpanID       string     `json:"spanId"`
	ParentSpanID string     `json:"parentSpanId"`
	Name         string     `json:"name"`
	Kind         int        `json:"kind"`
	Attributes   []otlpAttr `json:"attributes"`
	Events       []struct {
		Name       string     `json:"name"`
		Attributes []otlpAttr `json:"attributes"`
	} `json:"events"`
	service string // the resource's service.name
}

type otlpAttr struct {
	Key   string `json:"key"`
	Value struct {
		StringValue *string `json:"stringValue"`
		IntValue    *string `json:"intValue"`
	} `json:"value"`
}

// OTLP span kinds.
const (
	kindServer = 2
	kindClient = 3
)

func (s *otlpSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch {
			case a.Value.StringValue != nil:
				return *a.Value.StringValue
			case a.Value.IntValue != nil:
				return *a.Value.IntValue
			}
		}
	}
	return ""
}

func (s *otlpSpan) hasEvent(name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// spans reads every span the Collector wrote so far.
func (c *collector) spans(t *testing.T) []otlpSpan {
	t.Helper()
	data, err := os.ReadFile(c.file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []otlpSpan
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var batch struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []otlpAttr `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &batch); err != nil {
			continue // a line still being written
		}
		for _, rs := range batch.ResourceSpans {
			svc := (&otlpSpan{Attributes: rs.Resource.Attributes}).attr("service.name")
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.service = svc
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func findOTLP(spans []otlpSpan, name string, kind int) *otlpSpan {
	for i := range spans {
		if spans[i].Name == name && spans[i].Kind == kind {
			return &spans[i]
		}
	}
	return nil
}

// TestOpenTelemetryCollector: a task-augmented tools/call with a
// traceparent, through taskgate exporting over each OTLP protocol to a
// real Collector. The exported trace is the client's: taskgate's server
// span is the client's child, the background call's span the server
// span's child, the upstream received the call span's traceparent, store
// operations are children, the lifecycle is events, and taskgate's log
// lines carry the ids.
func TestOpenTelemetryCollector(t *testing.T) {
	col := startCollector(t)
	up := startLegacy(t, "--trace-tool")
	for _, tc := range []struct {
		protocol, endpoint string
	}{
		{protocol: "grpc", endpoint: "http://" + col.grpc},
		{protocol: "http/protobuf", endpoint: "http://" + col.http},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			service := "taskgate-e2e-" + strings.ReplaceAll(tc.protocol, "/", "-")
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_SERVICE_NAME", service)
			t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
			gw := startTaskgate(t, up.URL)

			c := newRawClient(t, gw.URL)
			c.header.Set("Traceparent", "00-"+e2eTraceID+"-"+e2eSpanID+"-01")
			c.initialize()
			task := c.createTask("traceparent", map[string]any{}, map[string]any{"ttl": 60000})
			c.waitStatus(task.TaskID, "completed", 30*time.Second)
			var res toolResult
			c.result("tasks/result", map[string]any{"taskId": task.TaskID}, &res)
			upstreamParent := res.text()

			var srv, call *otlpSpan
			var spans []otlpSpan
			waitFor(t, 30*time.Second, "the task's spans in the Collector's file", func() bool {
				spans = nil
				for _, s := range col.spans(t) {
					if s.service == service && s.TraceID == e2eTraceID {
						spans = append(spans, s)
					}
				}
				srv = findOTLP(spans, "tools/call traceparent", kindServer)
				call = findOTLP(spans, "tools/call traceparent", kindClient)
				return srv != nil && call != nil && findOTLP(spans, "tasks/result", kindServer) != nil
			})
			if srv.ParentSpanID != e2eSpanID {
				t.Errorf("server span parent = %q, want the client's span %s", srv.ParentSpanID, e2eSpanID)
			}
			for key, want := range map[string]string{
				"mcp.method.name":       "tools/call",
				"gen_ai.tool.name":      "traceparent",
				"gen_ai.operation.name": "execute_tool",
				"mcp.task.id":           task.TaskID,
				"mcp.protocol.version":  protocolVersion,
			} {
				if got := srv.attr(key); got != want {
					t.Errorf("server span %s = %q, want %q", key, got, want)
				}
			}
			if srv.attr("jsonrpc.request.id") == "" || srv.attr("mcp.session.id") == "" {
				t.Errorf("server span lacks jsonrpc.request.id or mcp.session.id: %+v", srv.Attributes)
			}
			if !srv.hasEvent("task.created") {
				t.Errorf("server span events %+v lack task.created", srv.Events)
			}
			if call.ParentSpanID != srv.SpanID {
				t.Errorf("call span parent = %q, want the server span %s", call.ParentSpanID, srv.SpanID)
			}
			if call.attr("mcp.task.id") != task.TaskID || call.attr("mcp.task.status") != "completed" {
				t.Errorf("call span attributes %+v, want mcp.task.id %s and status completed", call.Attributes, task.TaskID)
			}
			for _, ev := range []string{"task.created", "task.terminal"} {
				if !call.hasEvent(ev) {
					t.Errorf("call span events %+v lack %s", call.Events, ev)
				}
			}
			if want := "00-" + e2eTraceID + "-" + call.SpanID + "-01"; upstreamParent != want {
				t.Errorf("upstream received traceparent %q, want the call span's %q", upstreamParent, want)
			}
			for _, name := range []string{"taskstore create", "taskstore finish"} {
				s := findOTLP(spans, name, kindClient)
				if s == nil || s.ParentSpanID != call.SpanID || s.attr("mcp.task.id") != task.TaskID {
					t.Errorf("%s span = %+v, want a child of the call span with mcp.task.id", name, s)
				}
			}
			if r := findOTLP(spans, "tasks/result", kindServer); r.attr("mcp.task.id") != task.TaskID {
				t.Errorf("tasks/result span mcp.task.id = %q, want %q", r.attr("mcp.task.id"), task.TaskID)
			}

			// taskgate's log lines inside the traced request and call,
			// polled: the harness reads the process's output through a
			// pipe, so a line written just now may not be in it yet (CI
			// once read only the start-up lines).
			var created, finished bool
			_ = e2etest.PollUntil(10*time.Second, func() (bool, error) {
				created, finished = false, false
				for _, line := range strings.Split(gw.p.Output(), "\n") {
					var l map[string]any
					if json.Unmarshal([]byte(line), &l) != nil || l["task_id"] != task.TaskID {
						continue
					}
					switch l["message"] {
					case "task created":
						created = l["trace_id"] == e2eTraceID && l["span_id"] == srv.SpanID
					case "task finished":
						finished = l["trace_id"] == e2eTraceID && l["span_id"] == call.SpanID
					}
				}
				return created && finished, nil
			})
			if !created || !finished {
				t.Errorf("log lines with the span ids: task created %v, task finished %v; output:\n%s", created, finished, gw.p.Output())
			}
		})
	}
}
