package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/proxy/admin"
	"github.com/taskgate/taskgate/taskstore"
)

// newAdminAPI sets up the admin task API and dashboard (off without
// --admin-token-file) and registers the task gauges computed from the
// store (taskgate_tasks, taskgate_task_oldest_running_age_seconds), which
// are on whenever the store can count its tasks.
func newAdminAPI(o *options, st *openedStore, h *proxy.Handler, reloader *policyReloader, reg prometheus.Registerer, log zerolog.Logger) (*admin.Server, error) {
	if st.admin != nil {
		reg.MustRegister(admin.NewCollector(st.admin, nil, log))
	}
	if o.adminTokenFile != "" && st.admin == nil {
		return nil, errors.New("--admin-token-file: this task store cannot list tasks across owners")
	}
	s, err := admin.New(admin.Config{
		TokenFile: o.adminTokenFile,
		Store:     st.admin,
		Cancel:    h.CancelTask,
		Reload:    func() error { return reloader.Reload("admin API") },
	}, log)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file: %w", err)
	}
	return s, nil
}

// adminMux serves /healthz (alive), /readyz (the upstream accepts
// connections: pass-through works, whatever the store's state),
// /readyz/store (the task store answers), /metrics, and under /admin the
// admin task API and dashboard (404 unless --admin-token-file is set).
func adminMux(reg *prometheus.Registry, store taskstore.Store, h *proxy.Handler, api *admin.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/admin", api)
	mux.Handle("/admin/", api)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	check := func(what string, ping func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ping(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, what+": "+err.Error()+"\n")
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		}
	}
	mux.HandleFunc("/readyz", check("upstream", h.PingUpstream))
	mux.HandleFunc("/readyz/store", check("store", store.Ping))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
