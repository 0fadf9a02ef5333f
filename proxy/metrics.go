package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus collectors of a Handler. Create them once per
// registry with NewMetrics.
type Metrics struct {
	requests        *prometheus.CounterVec
	upstreamLatency *prometheus.HistogramVec
	inflight        prometheus.Gauge
	tasks           *prometheus.CounterVec
	running         prometheus.GaugeFunc
	runningNow      atomic.Int64
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, e.g. in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_requests_total",
			Help: "Requests by JSON-RPC method and outcome.",
		}, []string{"method", "outcome"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskgate_upstream_latency_seconds",
			Help:    "Time until the upstream's response headers, by JSON-RPC method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskgate_inflight_requests",
			Help: "Client requests being served.",
		}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_tasks_total",
			Help: "Task lifecycle events (created, completed, failed, cancelled, dropped, refused).",
		}, []string{"event"}),
	}
	m.running = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "taskgate_tasks_running",
		Help: "Background task calls running in this process.",
	}, func() float64 { return float64(m.runningNow.Load()) })
	if reg != nil {
		reg.MustRegister(m.requests, m.upstreamLatency, m.inflight, m.tasks, m.running)
	}
	return m
}

// metricMethod bounds label cardinality: client-chosen method names are not
// used as labels unless they are MCP methods the proxy knows.
func metricMethod(m string) string {
	switch m {
	case "", "batch", methodInitialize, methodToolsList, methodToolsCall, methodTasksGet,
		methodTasksResult, methodTasksList, methodTasksCancel, methodPing,
		"notifications/initialized", notificationCancelled, "resources/list", "resources/read",
		"resources/templates/list", "prompts/list", "prompts/get", "completion/complete",
		"logging/setLevel", "notifications/progress", "notifications/roots/list_changed", "get_stream",
		methodDiscover, methodTasksUpdate:
		return m
	}
	return "other"
}
