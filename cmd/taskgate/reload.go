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

// errNoPolicyFile is Reload's answer when taskgate runs without --config.
var errNoPolicyFile = fmt.Errorf("%w: no --config policy file to reload; the default policy stays", admin.ErrNothingToReload)

// policyReloader reloads the policy file: on SIGHUP, when the file changes
// on disk, and on the admin API's request. A file that does not load
// (missing, bad YAML, a bad value) changes nothing: the previous policy
// stays and the error is logged with the file's line. It is safe for
// concurrent use.
type policyReloader struct {
	path string
	h    *proxy.Handler
	log  zerolog.Logger
	n    *prometheus.CounterVec
	mu   sync.Mutex // one reload at a time
}

func newPolicyReloader(reg prometheus.Registerer, path string, h *proxy.Handler, log zerolog.Logger) *policyReloader {
	r := &policyReloader{path: path, h: h, log: log,
		n: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_policy_reloads_total",
			Help: "Policy reloads (SIGHUP, file changed, admin API) by result: ok, or error (the previous policy stayed)."}, []string{"result"})}
	r.n.WithLabelValues("ok")
	r.n.WithLabelValues("error")
	reg.MustRegister(r.n)
	return r
}

// Reload loads, validates and installs the policy file; cause names what
// asked for it in the log ("SIGHUP", "file changed", "admin API"). It
// returns why the file was refused (the previous policy then stays), or
// errNoPolicyFile without --config.
func (r *policyReloader) Reload(cause string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path == "" {
		r.log.Warn().Str("cause", cause).Msg(errNoPolicyFile.Error())
		return errNoPolicyFile
	}
	p, err := policy.Load(r.path)
	if err != nil {
		r.n.WithLabelValues("error").Inc()
		r.log.Error().Err(err).Str("cause", cause).Str("config", r.path).Msg("policy file not reloaded; the previous policy stays")
		return err
	}
	r.h.SetPolicy(p)
	r.n.WithLabelValues("ok").Inc()
	r.log.Info().Str("cause", cause).Str("config", r.path).Msg("policy reloaded; requests from now on use it")
	if p.RetriesRequested() {
		r.log.Warn().Msg(retriesWarning)
	}
	return nil
}
