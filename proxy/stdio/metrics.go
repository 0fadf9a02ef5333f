package stdio

import "github.com/prometheus/client_golang/prometheus"

// metrics are a Server's Prometheus collectors.
type metrics struct {
	exits   *prometheus.CounterVec // by reason
	refused *prometheus.CounterVec // initialize without a child, by reason
	dropped *prometheus.CounterVec // lines of the child dropped, by reason
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_stdio_exits_total",
			Help: "Stdio server processes that ended, by reason (stopped: by taskgate; crashed: on their own; init_timeout: killed before answering initialize).",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_stdio_refused_total",
			Help: "Initialize requests that got no stdio server process, by reason (full, start_failed, shutting_down).",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgate_stdio_dropped_lines_total",
			Help: "Lines of stdio servers' output dropped, by reason (invalid: not a JSON-RPC message; too_long: over the line limit).",
		}, []string{"reason"}),
	}
	// Created at 0, so that increase() sees the first one after a start.
	for _, r := range []string{"stopped", "crashed", "init_timeout"} {
		m.exits.WithLabelValues(r)
	}
	for _, r := range []string{"full", "start_failed", "shutting_down"} {
		m.refused.WithLabelValues(r)
	}
	for _, r := range []string{"invalid", "too_long"} {
		m.dropped.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.exits, m.refused, m.dropped,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "taskgate_stdio_children",
				Help: "Stdio server processes running (one per client session).",
			}, func() float64 { return float64(s.Children()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "taskgate_stdio_started_total",
				Help: "Stdio server processes started.",
			}, func() float64 { return float64(s.Started()) }))
	}
	return m
}
