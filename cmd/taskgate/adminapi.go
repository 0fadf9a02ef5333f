package main

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/proxy/admin"
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
