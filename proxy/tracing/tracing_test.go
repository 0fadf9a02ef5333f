package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/taskgate/taskgate/taskstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The on/off rule of FromEnv: off unless an exporter or endpoint is asked
// for; OTEL_SDK_DISABLED and exporter none win.
func TestEnabled(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{name: "nothing set", env: nil, want: false},
		{name: "service name only", env: map[string]string{"OTEL_SERVICE_NAME": "x"}, want: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, want: false},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
		{name: "sdk disabled other case", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, want: false},
		{name: "sdk not disabled", env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := enabled(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("enabled(%v) = %v, want %v", tc.env, got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "otlp": true, "none": true, "console": false, "otlp,zipkin": false} {
		err := Check(func(k string) string {
			if k == "OTEL_TRACES_EXPORTER" {
				return v
			}
			return ""
		})
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("Check(OTEL_TRACES_EXPORTER=%q) = %v, want ok %v", v, err, ok)
		}
	}
}

// FromEnv returns nil when tracing is off and refuses a protocol it cannot
// speak; on, it exports with the environment's service name.
func TestFromEnv(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		t.Setenv("OTEL_TRACES_EXPORTER", "")
		tr, err := FromEnv(context.Background(), "v1")
		if tr != nil || err != nil {
			t.Errorf("FromEnv() = %v, %v; want nil, nil", tr, err)
		}
	})
	t.Run("bad protocol", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
		if _, err := FromEnv(context.Background(), "v1"); !errors.Is(err, ErrConfig) {
			t.Errorf("FromEnv(http/json) = %v, want ErrConfig", err)
		}
	})
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(proto, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			tr, err := FromEnv(context.Background(), "v1")
			if err != nil || tr == nil {
				t.Fatalf("FromEnv() = %v, %v", tr, err)
			}
			// Nothing to flush: shutting down does not wait for the
			// unreachable endpoint.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

// The server span continues the trace in the request's traceparent, and
// Inject replaces the client's header with the span's context.
func TestPropagation(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := New(tp)
	var hdr fasthttp.RequestHeader
	hdr.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	hdr.Set("tracestate", "vendor=x")
	ctx, span := tr.StartServer(context.Background(), &hdr, "tools/call echo")
	if got := span.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id = %s, want the client's", got)
	}
	tr.Inject(ctx, &hdr)
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span.SpanContext().SpanID().String() + "-01"
	if got := string(hdr.Peek("Traceparent")); got != want {
		t.Errorf("traceparent after Inject = %q, want %q", got, want)
	}
	if got := string(hdr.Peek("Tracestate")); got != "vendor=x" {
		t.Errorf("tracestate after Inject = %q, want the client's kept", got)
	}
	if n := len(hdr.PeekAll("Traceparent")); n != 1 {
		t.Errorf("%d traceparent headers after Inject, want 1", n)
	}
	span.End()
	if s := exp.GetSpans(); len(s) != 1 || s[0].SpanKind != trace.SpanKindServer || !s[0].Parent.IsRemote() {
		t.Errorf("spans = %+v, want one server span with a remote parent", s)
	}
}

// The store wrapper makes child spans only under a recording span, and a
// contract answer (not found) is no error.
func TestStoreSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := New(tp)
	emb, closeStore, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	st := tr.Store(emb)

	if _, err := st.Get(context.Background(), "o", "missing"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("Get = %v", err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("untraced Get made %d spans, want 0", n)
	}
	ctx, parent := tr.StartInternal(context.Background(), "parent")
	if _, err := st.Get(ctx, "o", "missing"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("Get = %v", err)
	}
	parent.End()
	var get *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		if spans[i].Name == "taskstore get" {
			get = &spans[i]
		}
	}
	if get == nil || get.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans = %+v, want taskstore get under parent", spans)
	}
	if get.Status.Code != 0 {
		t.Errorf("not found marked the span %v, want unset (a contract answer)", get.Status)
	}
}
