package main

import (
	"context"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/taskstore"
)

// BenchmarkRequestLogging measures what the default info level costs per
// proxied request: a plain tools/call through a Handler (ServeFastHTTP
// against a loopback upstream) logging its request line to a pipe whose
// reader copies it away, as a container runtime reads stderr, either
// written directly by the request's goroutine ("direct", before the log
// writer) or queued to the log writer ("queued"); "off" logs nothing, the
// baseline. Compare ns/op: the difference to "off" is the logging cost.
func BenchmarkRequestLogging(b *testing.B) {
	up := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		rc.SetBodyString(`{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"hello"}]}}`)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	defer up.Shutdown()

	for _, mode := range []string{"off", "direct", "queued"} {
		b.Run(mode, func(b *testing.B) {
			pr, pw, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			drained := make(chan struct{})
			go func() { _, _ = io.Copy(io.Discard, pr); close(drained) }()
			var out io.Writer = pw
			var lw *logWriter
			switch mode {
			case "off":
				out = io.Discard
			case "queued":
				lw = newLogWriter(pw, 8192)
				out = lw
			}
			log := zerolog.New(out).Level(zerolog.InfoLevel).With().Timestamp().Logger()
			if mode == "off" {
				log = log.Level(zerolog.WarnLevel)
			}
			st, closer, err := taskstore.NewEmbedded(taskstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer closer()
			h, err := proxy.New(proxy.Config{Upstream: "http://" + ln.Addr().String() + "/mcp"}, nil, st, log, nil)
			if err != nil {
				b.Fatal(err)
			}
			req := fasthttp.AcquireRequest()
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI("/mcp")
			req.Header.SetHost("gw.test")
			req.Header.SetContentType("application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", "bench")
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			req.SetBodyString(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
			var rc fasthttp.RequestCtx
			rc.Init(req, nil, nil)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				req.CopyTo(&rc.Request)
				h.ServeFastHTTP(&rc)
				if rc.Response.StatusCode() != fasthttp.StatusOK {
					b.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
				}
				if err := rc.Response.BodyWriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
				rc.Response.Reset()
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = h.Close(ctx)
			if lw != nil {
				_ = lw.Close()
				if n := lw.Dropped(); n > 0 {
					b.ReportMetric(float64(n)/float64(b.N), "dropped/op")
				}
			}
			pw.Close()
			<-drained
			pr.Close()
		})
	}
}

// BenchmarkLogLine is the request's own cost of one info line shaped like
// the proxy's request line: written to a pipe directly, or queued.
func BenchmarkLogLine(b *testing.B) {
	for _, mode := range []string{"direct", "queued"} {
		b.Run(mode, func(b *testing.B) {
			pr, pw, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			drained := make(chan struct{})
			go func() { _, _ = io.Copy(io.Discard, pr); close(drained) }()
			var out io.Writer = pw
			var lw *logWriter
			if mode == "queued" {
				lw = newLogWriter(pw, 8192)
				out = lw
			}
			log := zerolog.New(out).With().Timestamp().Logger()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				log.Info().Uint64("req_id", 4294967297).Str("http_method", "POST").Int("status", 200).
					Str("outcome", "ok").Dur("dur", 850*time.Microsecond).Str("rpc_method", "tools/call").
					Str("session", "388f671fe603").Msg("request")
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if lw != nil {
				_ = lw.Close()
				if n := lw.Dropped(); n > 0 {
					b.ReportMetric(float64(n)/float64(b.N), "dropped/op")
				}
			}
			pw.Close()
			<-drained
			pr.Close()
		})
	}
}

// cpuTime is the CPU time (user + system) of this process so far: every
// goroutine's, the pipe reader's and the log writer's included, which a
// per-request wall time on a shared machine does not show.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
