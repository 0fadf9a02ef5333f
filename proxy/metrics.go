package proxy

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// Metrics are the Prometheus collectors of a Handler. Create them once per
// registry with NewMetrics. Labels are bounded: method is a known MCP
// method or "other"; tool is the pattern of the policy rule the tool
// matched (as written in the policy file), "other" for tools no rule
// names, or "none" for events without a tool.
type Metrics struct {
	requests        *prometheus.CounterVec
	requestDur      *prometheus.HistogramVec
	upstreamLatency *prometheus.HistogramVec
	inflight        prometheus.Gauge
	openStreams     prometheus.Gauge
	waiters         prometheus.Gauge
	tasks           *prometheus.CounterVec
	taskDur         *prometheus.HistogramVec
	callDur         *prometheus.HistogramVec
	rateLimited     prometheus.Counter
	buildInfo       *prometheus.GaugeVec
	storeDur        *prometheus.HistogramVec
	storeErrs       *prometheus.CounterVec
	running         prometheus.GaugeFunc
	runningNow      atomic.Int64
	// requestDurOf and upstreamOf hold requestDur's and upstreamLatency's
	// histogram of each metric method once used (observers).
	requestDurOf, upstreamOf sync.Map
}

// observer returns vec's histogram of the metric method label, from
// cache. WithLabelValues checks, hashes and looks up its labels under a
// lock on every call, a cost paid twice per proxied request otherwise; the
// cache holds at most one entry per metric method (a bounded set) and
// creates a series only when first observed, as WithLabelValues would.
func observer(cache *sync.Map, vec *prometheus.HistogramVec, label string) prometheus.Observer {
	if o, ok := cache.Load(label); ok {
		return o.(prometheus.Observer)
	}
	o, _ := cache.LoadOrStore(label, vec.WithLabelValues(label))
	return o.(prometheus.Observer)
}

// observeRequest records a client request's duration under its method.
func (m *Metrics) observeRequest(method string, d time.Duration) {
	observer(&m.requestDurOf, m.requestDur, wire.MetricLabel(method)).Observe(d.Seconds())
}

// observeUpstream records the time until the upstream's response headers
// of a request of this method.
func (m *Metrics) observeUpstream(method string, d time.Duration) {
	observer(&m.upstreamOf, m.upstreamLatency, wire.MetricLabel(method)).Observe(d.Seconds())
}

// Buckets of the task and background call durations: tasks run for
// seconds to hours.
var longBuckets = []float64{.1, .5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, e.g. in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_requests_total",
			Help: "Client requests by JSON-RPC method and outcome, counted when the answer ended (streams included).",
		}, []string{"method", "outcome"}),
		requestDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskgate_request_duration_seconds",
			Help:    "Client request duration until the answer ended (a stream's whole life), by JSON-RPC method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
		}, []string{"method"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskgate_upstream_latency_seconds",
			Help:    "Time until the upstream's response headers, by JSON-RPC method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskgate_inflight_requests",
			Help: "Client requests whose handler is running (a streamed answer leaves it when its headers are ready).",
		}),
		openStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskgate_open_streams",
			Help: "Streamed answers being sent to clients (GET streams, SSE answers, tasks/result streams).",
		}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskgate_result_waiters",
			Help: "tasks/result requests waiting for their task to end.",
		}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_tasks_total",
			Help: "Task lifecycle events (created, completed, failed, cancelled, lost, expired, dropped, refused, rate_limited, lookup_miss) by tool.",
		}, []string{"event", "tool"}),
		taskDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskgate_task_duration_seconds",
			Help:    "Task duration from creation to its terminal status, by tool and outcome (completed, failed, cancelled, lost).",
			Buckets: longBuckets,
		}, []string{"tool", "outcome"}),
		callDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskgate_task_upstream_call_seconds",
			Help:    "Duration of background upstream calls of tasks, from sending the call to its final answer, by tool.",
			Buckets: longBuckets,
		}, []string{"tool"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskgate_rate_limited_total",
			Help: "Task operations refused by the per-owner rate limit.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskgate_build_info",
			Help: "Always 1; labels name the taskgate version and the Go version that built it.",
		}, []string{"version", "goversion"}),
		storeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskgate_store_op_duration_seconds",
			Help:    "Task store operation latency, by operation (create, get, finish, cancel, outcome, list, renew, recover, enqueue, drain, answer, add_input, inputs, answer_inputs).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 3},
		}, []string{"op"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_store_errors_total",
			Help: "Task store operations that failed (unreachable, timed out, bad reply; not found and similar answers excluded), by operation.",
		}, []string{"op"}),
	}
	m.running = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "taskgate_tasks_running",
		Help: "Background task calls running in this process.",
	}, func() float64 { return float64(m.runningNow.Load()) })
	// A module version only when built as a versioned module (go install
	// module@v1.2.3); a build from a source tree reports "(devel)", so the
	// command passes its own version (-ldflags -X) to SetBuildVersion.
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	m.SetBuildVersion(version)
	m.zeroCounters()
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

// Label values whose counters exist from the start, at 0: a series that
// appears with its first increment is invisible to increase() and rate()
// for that increment, so the first error after a restart would raise no
// alert.
var (
	// zeroTaskEvents are taskgate_tasks_total's events.
	zeroTaskEvents = []string{"created", "completed", "failed", "cancelled", "lost", "expired", "dropped", "refused", "rate_limited", "lookup_miss"}
	// zeroStoreOps are the operations taskgate_store_errors_total counts
	// (the engine's metered store).
	zeroStoreOps = []string{"create", "get", "finish", "cancel", "outcome", "list", "renew", "recover", "enqueue", "drain",
		"answer", "add_input", "inputs", "answer_inputs"}
	// zeroOutcomes are the request outcomes worth an alert (and ok, the
	// denominator), created for every method label.
	zeroOutcomes = []string{"ok", "rpc_error", "upstream_unreachable", "upstream_error", "store_unavailable"}
)

// zeroCounters creates the counters of the fixed label values at 0.
func (m *Metrics) zeroCounters() {
	for _, op := range zeroStoreOps {
		m.storeErrs.WithLabelValues(op)
	}
	labels := []string{wire.MetricNoMethod, wire.MetricBatch, wire.MetricGetStream, "other"}
	for i := range wire.Methods() {
		labels = append(labels, wire.Methods()[i].Metric)
	}
	for _, l := range labels {
		for _, o := range zeroOutcomes {
			m.requests.WithLabelValues(l, o)
		}
	}
	m.zeroTools(nil)
}

// zeroTools creates taskgate_tasks_total at 0 for every event of the tool
// labels other, none and each policy pattern.
func (m *Metrics) zeroTools(patterns []string) {
	for _, tool := range append([]string{"other", "none"}, patterns...) {
		for _, ev := range zeroTaskEvents {
			m.tasks.WithLabelValues(ev, tool)
		}
	}
}

// SetBuildVersion sets the version label of taskgate_build_info (one
// series: the previous one is removed).
func (m *Metrics) SetBuildVersion(version string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.requestDur, m.upstreamLatency, m.inflight, m.openStreams, m.waiters,
		m.tasks, m.taskDur, m.callDur, m.rateLimited, m.buildInfo, m.storeDur, m.storeErrs, m.running}
}

// toolLabel bounds the tool label: the rule of pol that covers tool (its
// pattern), else "other".
func toolLabel(pol *policy.Policy, tool string) string {
	if tool == "" {
		return "none"
	}
	if p := pol.RuleFor(tool); p != "" {
		return p
	}
	return "other"
}

// engineHooks reports the task engine's events as metrics m, labelling
// tools by the current policy (pol), and, with tracing on (tr), runs its
// calls under their spans; root bounds the spans of lease recovery.
func engineHooks(m *Metrics, pol func() *policy.Policy, tr *tracing.Tracer, root func() context.Context) engine.Hooks {
	hooks := engine.Hooks{
		// TaskEvent counts a task lifecycle event of tool ("" when unknown).
		TaskEvent: func(event, tool string) {
			m.tasks.WithLabelValues(event, toolLabel(pol(), tool)).Inc()
		},
		TaskDuration: func(tool, status string, age time.Duration) {
			m.taskDur.WithLabelValues(toolLabel(pol(), tool), status).Observe(age.Seconds())
		},
		CallDuration: func(tool string, d time.Duration) {
			m.callDur.WithLabelValues(toolLabel(pol(), tool)).Observe(d.Seconds())
		},
		Running:     func(delta int64) { m.runningNow.Add(delta) },
		RateLimited: m.rateLimited.Inc,
		StoreOp: func(op string, d time.Duration, failed bool) {
			m.storeDur.WithLabelValues(op).Observe(d.Seconds())
			if failed {
				m.storeErrs.WithLabelValues(op).Inc()
			}
		},
	}
	if tr != nil {
		hooks.CallContext = wire.CallContext
		hooks.Lost = func(t *taskstore.Task) { leaseLost(tr, root(), t) }
		hooks.LogContext = wire.LogContext
	}
	return hooks
}
