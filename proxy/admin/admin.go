// Package admin is taskgate's operator interface on the admin listener:
// a JSON task API across owners and replicas (/admin/v1/...), a policy
// reload endpoint, a task dashboard (/admin/) and Prometheus gauges of the
// tasks in the store.
//
// The API is off unless a token file is configured; every API request
// must then carry "Authorization: Bearer <token>". Answers never contain
// a task's payload (arguments, results, questions) nor a client's token:
// a task's owner is shown as the keyed hash the store files it under.
// Each request is logged with the fingerprint of the token it used.
//
// Routes:
//
//	GET  /admin/                      the dashboard (one HTML page, no external assets)
//	GET  /admin/v1/tasks              list: status, tool, runner, olderThan, cursor, limit
//	GET  /admin/v1/tasks/{id}         one task
//	POST /admin/v1/tasks/{id}/cancel  cancel it, wherever its call runs
//	GET  /admin/v1/stats              counts by status and tool, oldest running task per tool
//	POST /admin/v1/reload             re-read the policy file
//
// Errors are JSON, {"error": message, "code": kind}, with the HTTP status
// saying what happened: 400 a bad filter or id, 401 no or a wrong token,
// 404 no such task (or the API is off), 405 a wrong method, 409 the task
// already finished, 503 the task store is unreachable, 504 it timed out.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/taskstore"
)

// OperatorCancelMessage is the statusMessage of a task an operator cancelled.
const OperatorCancelMessage = "cancelled by an operator"

// ErrNothingToReload is what Config.Reload returns (wrapped) when there is
// no policy file to reload; the API answers it with 409.
var ErrNothingToReload = errors.New("no policy file to reload")

// Log keys.
const (
	logTokenFP    = "token_fp"    // fingerprint of the admin token a request used
	logPreviousFP = "previous_fp" // the token's fingerprint before a reload
	logTaskID     = "task_id"
	logOwner      = "owner" // the owner's keyed hash
	logTool       = "tool"
	logRunner     = "runner"
	logMethod     = "method"
	logPath       = "path"
	logRemote     = "remote"
	logStatus     = "status"
	logDuration   = "dur_ms"
	logTokenGiven = "token_given" // an Authorization header was sent (its content never is logged)
	logReloaded   = "reloaded"
)

// requestTimeout bounds one API request's store operations.
const requestTimeout = 10 * time.Second

// Config configures the admin API.
type Config struct {
	// TokenFile is the path of the file holding the bearer token. Empty:
	// the API and the dashboard are off (404).
	TokenFile string
	// Store reads tasks across owners. Required when TokenFile is set.
	Store taskstore.Admin
	// Cancel cancels owner's task id with statusMessage msg as the owner's
	// own tasks/cancel does (taskgate's proxy.Handler.CancelTask).
	// Required when TokenFile is set.
	Cancel func(ctx context.Context, owner, id, msg string) (*taskstore.Task, error)
	// Reload re-reads the policy file; nil answers 409 (nothing to reload).
	// A returned error keeps the previous policy.
	Reload func() error
	// Now is the clock for ages; nil means time.Now.
	Now func() time.Time
}

// Server serves the admin API and the dashboard. It is safe for
// concurrent use.
type Server struct {
	cfg   Config
	token *tokenFile // nil: the API is off
	log   zerolog.Logger
	// refusedLog logs refused requests, at most 10 lines a minute: a
	// scanner must not flood the log.
	refusedLog zerolog.Logger
	mux        *http.ServeMux
}

// New checks cfg and reads the token file once: a missing, unreadable or
// empty token file is an error.
func New(cfg Config, log zerolog.Logger) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: log.With().Str("component", "admin").Logger(), mux: http.NewServeMux()}
	s.refusedLog = s.log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Minute})
	if cfg.TokenFile != "" {
		if cfg.Store == nil || cfg.Cancel == nil {
			return nil, errors.New("admin: Store and Cancel are required with a token file")
		}
		tf, err := openTokenFile(cfg.TokenFile, s.log)
		if err != nil {
			return nil, err
		}
		s.token = tf
	}
	s.mux.HandleFunc("/admin/v1/tasks", s.api(http.MethodGet, s.list))
	s.mux.HandleFunc("/admin/v1/tasks/{id}", s.api(http.MethodGet, s.get))
	s.mux.HandleFunc("/admin/v1/tasks/{id}/cancel", s.api(http.MethodPost, s.cancel))
	s.mux.HandleFunc("/admin/v1/stats", s.api(http.MethodGet, s.stats))
	s.mux.HandleFunc("/admin/v1/reload", s.api(http.MethodPost, s.reload))
	s.mux.HandleFunc("/admin/v1/", s.api("", func(w http.ResponseWriter, _ *http.Request, _ *reqLog) {
		writeError(w, http.StatusNotFound, "not_found", "no such admin API path")
	}))
	s.mux.HandleFunc("/admin/{$}", s.dashboard)
	s.mux.HandleFunc("/admin", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
	})
	s.mux.HandleFunc("/admin/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such admin path")
	})
	return s, nil
}

// Enabled reports whether a token file is configured (the API is on).
func (s *Server) Enabled() bool { return s.token != nil }

// ServeHTTP serves the paths under /admin.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.token == nil {
		writeError(w, http.StatusNotFound, "disabled", "the admin API is off: start taskgate with --admin-token-file")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// reqLog collects what an API request's log line reports.
type reqLog struct {
	fp   string // the token's fingerprint
	task string // the task id of the path, once checked
}

// api wraps an API handler: method check, bearer token, a log line for
// every request with the token's fingerprint (never the token).
func (s *Server) api(method string, h func(http.ResponseWriter, *http.Request, *reqLog)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		auth := r.Header.Get("Authorization")
		tok, isBearer := strings.CutPrefix(auth, "Bearer ")
		if !isBearer {
			tok, isBearer = strings.CutPrefix(auth, "bearer ")
		}
		fp, ok := s.token.check([]byte(strings.TrimSpace(tok)))
		if !isBearer || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate admin"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "a valid admin token is required (Authorization: Bearer <token>)")
			s.refusedLog.Warn().Str(logMethod, r.Method).Str(logPath, r.URL.Path).Str(logRemote, r.RemoteAddr).
				Bool(logTokenGiven, auth != "").Msg("admin request refused: no or a wrong token")
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rl := &reqLog{fp: fp}
		if method != "" && r.Method != method {
			w.Header().Set("Allow", method)
			writeError(sw, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+r.URL.Path+": use "+method)
		} else {
			h(sw, r, rl)
		}
		ev := s.log.Info()
		if r.Method == http.MethodGet {
			ev = s.log.Debug() // reads are frequent (the dashboard refreshes); actions are always logged
		}
		ev = ev.Str(logMethod, r.Method).Str(logPath, r.URL.Path).Int(logStatus, sw.status).Str(logTokenFP, fp)
		if rl.task != "" {
			ev = ev.Str(logTaskID, rl.task)
		}
		ev.Float64(logDuration, float64(time.Since(start).Microseconds())/1000).Msg("admin request")
	}
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// apiError is the JSON body of an error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

// storeError answers a store failure: 404 unknown task, 400 bad cursor,
// 409 finished, 504 timed out, 503 unreachable, else 500.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no such task (unknown, or expired)")
	case errors.Is(err, taskstore.ErrBadCursor):
		writeError(w, http.StatusBadRequest, "bad_cursor", "cursor: not a cursor this API issued (or issued under another key)")
	case errors.Is(err, taskstore.ErrTerminal):
		writeError(w, http.StatusConflict, "finished", "the task already finished; it cannot be cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, "store_timeout", "the task store did not answer in time")
	case errors.Is(err, taskstore.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the task store is unreachable")
	default:
		writeError(w, http.StatusInternalServerError, "internal", "task store error: "+err.Error())
	}
}
