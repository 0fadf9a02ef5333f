package main

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/proxy/admin"
)

// policyReloader reloads the policy file on SIGHUP and on the admin API's
// POST /admin/v1/reload; one reload runs at a time. A file that does not
// load (missing, bad YAML, a bad value) changes nothing: the previous policy
// stays and the error is logged with the file's line.
type policyReloader struct {
	path string
	h    *proxy.Handler
	log  zerolog.Logger
	n    *prometheus.CounterVec
	mu   sync.Mutex
}

func newPolicyReloader(reg prometheus.Registerer, path string, h *proxy.Handler, log zerolog.Logger) *policyReloader {
	r := &policyReloader{path: path, h: h, log: log,
		n: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_policy_reloads_total",
			Help: "Policy reloads (SIGHUP or the admin API) by result: ok, or error (the previous policy stayed)."}, []string{"result"})}
	r.n.WithLabelValues("ok")
	r.n.WithLabelValues("error")
	reg.MustRegister(r.n)
	return r
}

// reload loads, validates and installs the policy file; trigger names
// what asked for it in the log ("SIGHUP", "admin API"). The error says why
// the file was refused (the previous policy then stays), or wraps
// admin.ErrNothingToReload when taskgate runs without --config.
func (r *policyReloader) reload(trigger string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path == "" {
		r.log.Warn().Msg(trigger + ": no --config policy file to reload; the default policy stays")
		return fmt.Errorf("%w: taskgate runs without --config; the default policy stays", admin.ErrNothingToReload)
	}
	p, err := policy.Load(r.path)
	if err != nil {
		r.n.WithLabelValues("error").Inc()
		r.log.Error().Err(err).Str("config", r.path).Msg(trigger + ": policy file not reloaded; the previous policy stays")
		return err
	}
	r.h.SetPolicy(p)
	r.n.WithLabelValues("ok").Inc()
	r.log.Info().Str("config", r.path).Msg(trigger + ": policy reloaded; requests from now on use it")
	if p.RetriesRequested() {
		r.log.Warn().Msg(retriesWarning)
	}
	return nil
}
