package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// timeFormat is RFC 3339 in UTC with milliseconds, the store's precision.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Task is a task as the API shows it: its metadata, never its payload.
type Task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	Tool          string `json:"tool"`
	Owner         string `json:"owner"` // the owner's keyed hash
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           int64  `json:"ttl"` // ms from createdAt
	Runner        string `json:"runner"`
	Era           string `json:"era"`
}

// TaskList is the answer of GET /admin/v1/tasks.
type TaskList struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// ToolStats are one tool's counts.
type ToolStats struct {
	Tool     string         `json:"tool"`
	ByStatus map[string]int `json:"byStatus"`
	// OldestRunningCreatedAt and OldestRunningAgeSeconds describe the
	// oldest working or input_required task; absent when none runs.
	OldestRunningCreatedAt  string  `json:"oldestRunningCreatedAt,omitempty"`
	OldestRunningAgeSeconds float64 `json:"oldestRunningAgeSeconds,omitempty"`
}

// Stats is the answer of GET /admin/v1/stats.
type Stats struct {
	Now      string         `json:"now"`
	Total    int            `json:"total"`
	ByStatus map[string]int `json:"byStatus"` // every status, 0 included
	Tools    []ToolStats    `json:"tools"`    // by tool name
}

// statuses are the five task statuses in display order.
var statuses = []taskstore.Status{taskstore.Working, taskstore.InputRequired, taskstore.Completed, taskstore.Failed, taskstore.Cancelled}

func taskJSON(t *taskstore.Task) Task {
	return Task{
		TaskID: t.ID, Status: string(t.Status), StatusMessage: t.StatusMessage, Tool: t.Tool, Owner: t.Owner,
		CreatedAt: t.CreatedAt.UTC().Format(timeFormat), LastUpdatedAt: t.UpdatedAt.UTC().Format(timeFormat),
		TTL: t.TTL.Milliseconds(), Runner: t.Runner, Era: t.Era,
	}
}

// listParams are the query parameters of GET /admin/v1/tasks.
var listParams = map[string]bool{"status": true, "tool": true, "runner": true, "olderThan": true, "cursor": true, "limit": true}

// parseFilter reads the list filters. A parameter it does not know is an
// error, so a misspelt filter never silently lists everything.
func parseFilter(q url.Values) (taskstore.AdminFilter, error) {
	var f taskstore.AdminFilter
	for k, v := range q {
		if !listParams[k] {
			return f, fmt.Errorf("unknown parameter %q (filters: status, tool, runner, olderThan, cursor, limit)", k)
		}
		if len(v) > 1 && k != "status" {
			return f, fmt.Errorf("%s: given %d times", k, len(v))
		}
	}
	for _, v := range q["status"] {
		for _, s := range strings.Split(v, ",") {
			st := taskstore.Status(strings.TrimSpace(s))
			switch st {
			case taskstore.Working, taskstore.InputRequired, taskstore.Completed, taskstore.Failed, taskstore.Cancelled:
				f.Status = append(f.Status, st)
			default:
				return f, fmt.Errorf("status %q: want working, input_required, completed, failed or cancelled (comma-separated for several)", s)
			}
		}
	}
	f.Tool, f.Runner, f.Cursor = q.Get("tool"), q.Get("runner"), q.Get("cursor")
	if v := q.Get("olderThan"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return f, fmt.Errorf("olderThan %q: want a duration such as 90s, 5m or 1h30m", v)
		}
		f.OlderThan = d
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return f, fmt.Errorf("limit %q: want a number from 1 to 1000", v)
		}
		f.Limit = n
	}
	return f, nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_filter", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	tasks, next, err := s.cfg.Store.AdminList(ctx, f)
	if err != nil {
		storeError(w, err)
		return
	}
	out := TaskList{Tasks: make([]Task, 0, len(tasks)), NextCursor: next}
	for i := range tasks {
		out.Tasks = append(out.Tasks, taskJSON(&tasks[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// taskID reads and checks the {id} path segment: 1 to 128 characters of
// [A-Za-z0-9_-], the form of every task id taskgate issues.
func taskID(w http.ResponseWriter, r *http.Request, rl *reqLog) (string, bool) {
	id := r.PathValue("id")
	ok := len(id) > 0 && len(id) <= 128
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		writeError(w, http.StatusBadRequest, "bad_id", "not a task id (1 to 128 letters, digits, '_' or '-')")
		return "", false
	}
	rl.task = id
	return id, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	id, ok := taskID(w, r, rl)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	t, err := s.cfg.Store.AdminFind(ctx, id)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, taskJSON(t))
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	id, ok := taskID(w, r, rl)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	t, err := s.cfg.Store.AdminFind(ctx, id)
	if err == nil {
		if t.Status.Terminal() {
			err = taskstore.ErrTerminal
		} else {
			t, err = s.cfg.Cancel(ctx, t.Owner, id, OperatorCancelMessage)
		}
	}
	if err != nil {
		storeError(w, err)
		return
	}
	s.log.Info().Str(logTaskID, id).Str(logOwner, t.Owner).Str(logTool, t.Tool).Str(logRunner, t.Runner).
		Str("token_fp", rl.fp).Msg("task cancelled by an operator")
	writeJSON(w, http.StatusOK, taskJSON(t))
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	st, err := s.cfg.Store.AdminStats(ctx)
	if err != nil {
		storeError(w, err)
		return
	}
	now := s.cfg.Now()
	out := Stats{Now: now.UTC().Format(timeFormat), ByStatus: map[string]int{}, Tools: []ToolStats{}}
	for _, s := range statuses {
		out.ByStatus[string(s)] = st.ByStatus[s]
		out.Total += st.ByStatus[s]
	}
	for tool, by := range st.ByTool {
		ts := ToolStats{Tool: tool, ByStatus: map[string]int{}}
		for s, n := range by {
			ts.ByStatus[string(s)] = n
		}
		if c, ok := st.OldestRunning[tool]; ok {
			ts.OldestRunningCreatedAt = c.UTC().Format(timeFormat)
			ts.OldestRunningAgeSeconds = max(now.Sub(c).Seconds(), 0)
		}
		out.Tools = append(out.Tools, ts)
	}
	sort.Slice(out.Tools, func(i, j int) bool { return out.Tools[i].Tool < out.Tools[j].Tool })
	writeJSON(w, http.StatusOK, out)
}

// ReloadResult is the answer of POST /admin/v1/reload.
type ReloadResult struct {
	Reloaded bool   `json:"reloaded"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`
}

func (s *Server) reload(w http.ResponseWriter, _ *http.Request, rl *reqLog) {
	err := ErrNothingToReload
	if s.cfg.Reload != nil {
		err = s.cfg.Reload()
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, ReloadResult{Reloaded: true})
	case errors.Is(err, ErrNothingToReload):
		writeJSON(w, http.StatusConflict, ReloadResult{Error: err.Error(), Code: "nothing_to_reload"})
	default:
		// The policy file did not load: the previous policy stays.
		writeJSON(w, http.StatusUnprocessableEntity, ReloadResult{Error: err.Error() + "; the previous policy stays", Code: "bad_policy"})
	}
	s.log.Info().Str(logTokenFP, rl.fp).Bool(logReloaded, err == nil).Msg("policy reload requested through the admin API")
}
