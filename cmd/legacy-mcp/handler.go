package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTP header names.
const (
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerSessionID       = "Mcp-Session-Id"
)

// maxIDPeek bounds how much of a rejected body is read to find its id.
const maxIDPeek = 1 << 20

// Log keys.
const (
	keyMethod  = "method"
	keyPath    = "path"
	keyStatus  = "status"
	keyDur     = "dur"
	keySession = "has_session"
	keyVersion = "protocol_version"
)

// newHandler returns the HTTP handler serving server (see newServer) over
// Streamable HTTP at cfg.path; other paths get 404.
//
// Any POST without Mcp-Session-Id makes the SDK create a session, which
// lives until DELETE; closeSessions ends them all.
func newHandler(cfg config, server *mcp.Server, log *slog.Logger) http.Handler {
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless:                  cfg.stateless,
		JSONResponse:               cfg.jsonResponse,
		Logger:                     sdkLogger(log),
		DisableLocalhostProtection: cfg.anyHost,
	})
	mux := http.NewServeMux()
	mux.Handle(cfg.path, maxVersion(cfg.maxProtocolVersion, mcpHandler))
	return accessLog(log, mux)
}

// maxVersion answers HTTP 400 to a request whose MCP-Protocol-Version header
// is newer than max, like a server that does not know that version (spec
// H-14). The SDK alone would route a header of 2026-07-28 or later into its
// newer protocol instead. The body is a JSON-RPC error with the request's id
// (null when unknown), which lets SDK clients fall back to initialize.
func maxVersion(max string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(headerProtocolVersion)
		if v == "" || v <= max {
			next.ServeHTTP(w, r)
			return
		}
		id := json.RawMessage("null")
		if r.Method == http.MethodPost {
			var env struct {
				ID json.RawMessage `json:"id"`
			}
			if err := json.NewDecoder(io.LimitReader(r.Body, maxIDPeek)).Decode(&env); err == nil && len(env.ID) > 0 {
				id = env.ID
			}
		}
		body, err := json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *jsonrpc.Error  `json:"error"`
		}{"2.0", id, &jsonrpc.Error{
			Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("Bad Request: Unsupported protocol version %q (supported versions: %s)",
				v, strings.Join(versionsUpTo(max), ",")),
		}})
		if err != nil {
			http.Error(w, "Bad Request: Unsupported protocol version", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(body)
	})
}

// accessLog logs each request at debug level once it is answered.
func accessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		log.Debug("request",
			keyMethod, r.Method,
			keyPath, r.URL.Path,
			keyVersion, r.Header.Get(headerProtocolVersion),
			keySession, r.Header.Get(headerSessionID) != "",
			keyStatus, sw.status,
			keyDur, time.Since(start))
	})
}

// statusWriter records the status code. Unwrap keeps http.ResponseController
// (flushing SSE) working.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// closeSessions closes all sessions of server concurrently and waits. A
// session closes once its running requests returned; it then ends its
// streams, including standalone GET streams.
func closeSessions(server *mcp.Server) {
	var wg sync.WaitGroup
	for ss := range server.Sessions() {
		wg.Go(func() { _ = ss.Close() })
	}
	wg.Wait()
}
