package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy"
)

// policyReloader reloads the policy file on SIGHUP. A file that does not
// load (missing, bad YAML, a bad value) changes nothing: the previous policy
// stays and the error is logged with the file's line.
type policyReloader struct {
	path string
	h    *proxy.Handler
	log  zerolog.Logger
	n    *prometheus.CounterVec
}

func newPolicyReloader(reg prometheus.Registerer, path string, h *proxy.Handler, log zerolog.Logger) *policyReloader {
	r := &policyReloader{path: path, h: h, log: log,
		n: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_policy_reloads_total",
			Help: "Policy reloads on SIGHUP by result: ok, or error (the previous policy stayed)."}, []string{"result"})}
	r.n.WithLabelValues("ok")
	r.n.WithLabelValues("error")
	reg.MustRegister(r.n)
	return r
}

// reload loads, validates and installs the policy file.
func (r *policyReloader) reload() {
	if r.path == "" {
		r.log.Warn().Msg("SIGHUP: no --config policy file to reload; the default policy stays")
		return
	}
	p, err := policy.Load(r.path)
	if err != nil {
		r.n.WithLabelValues("error").Inc()
		r.log.Error().Err(err).Str("config", r.path).Msg("SIGHUP: policy file not reloaded; the previous policy stays")
		return
	}
	r.h.SetPolicy(p)
	r.n.WithLabelValues("ok").Inc()
	r.log.Info().Str("config", r.path).Msg("SIGHUP: policy reloaded; requests from now on use it")
	if p.RetriesRequested() {
		r.log.Warn().Msg(retriesWarning)
	}
}
