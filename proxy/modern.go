package proxy

import (
	"bytes"
	"encoding/base64"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/wire2026"
)

// The MCP 2026-07-28 wire (package wire2026 renders it). Requests of that
// revision carry no session; each names its protocol version and its
// client's capabilities in params._meta. taskgate tells the eras apart per
// request, in this order:
//
//  1. a request with an Mcp-Session-Id, a JSON-RPC response or a batch is
//     of the 2025 era and served exactly as before, and so is an initialize
//     whose params._meta names no protocol version, whatever its header (one
//     that names 2026-07-28 is a 2026 request for a method that revision
//     removed);
//  2. a request whose params._meta names a protocol version, or whose
//     MCP-Protocol-Version header is 2026-07-28 or later, is of the 2026
//     era: the _meta version must equal the header (else HTTP 400 and
//     -32020), must be 2026-07-28 (else 400 and -32022 listing the
//     versions served; a _meta naming a 2025 version equal to the header
//     is served as a 2025 request), and _meta must carry the client's
//     capabilities (else 400 and -32602);
//  3. anything else is of the 2025 era.
//
// On the 2026 wire tasks are the extension io.modelcontextprotocol/tasks,
// offered in server/discover and declared per request. The tasks are the
// same stored tasks as on the 2025 wire, rendered in the reader's era: a
// task created on one wire is read, cancelled and listed (tasks/list on
// 2025 sessions) on the other by the same owner, and a tool result with
// isError true reads as failed on the 2025 wire and as completed on this
// one.

// modernWire serves the 2026 wire of one Handler.
type modernWire struct {
	h *Handler
	// window is how long a task-eligible call may run before it becomes a
	// task: a call that ends sooner is answered plainly, and one whose
	// upstream asks the client something sooner gets an
	// InputRequiredResult (the questions come before the task exists).
	window time.Duration

	mu         sync.Mutex
	era        int       // upstream's era: 0 unknown, 2025 or 2026
	native     bool      // a 2026 upstream that offers the tasks extension itself
	probeAfter time.Time // no new era probe before this after one failed

	sessions bridgeSessions
	// calls are the bridged plain calls running, which a
	// notifications/cancelled can reach (modern_cancel.go).
	calls inflightCalls
}

// Upstream eras.
const (
	era2025 = 2025
	era2026 = 2026
)

// defaultPromoteWindow is modernWire.window unless Config.PromoteWindow.
const defaultPromoteWindow = 250 * time.Millisecond

func newModernWire(h *Handler) *modernWire {
	w := &modernWire{h: h, window: defaultPromoteWindow}
	if h.cfg.PromoteWindow > 0 {
		w.window = h.cfg.PromoteWindow
	}
	w.sessions.init(w, 1024, 5*time.Minute)
	return w
}

// modernMeta is what a 2026 request's params._meta says.
type modernMeta struct {
	version string
	hasCaps bool
	// logLevel is the lowest level of log messages the request wants
	// ("" = none).
	logLevel string
	// The client capabilities this request declares.
	tasks, elicitation, sampling, roots bool
	// The elicitation modes it declares (an empty elicitation object is
	// form mode).
	elicitForm, elicitURL bool
}

var metaVersionKey = []byte(wire2026.MetaProtocolVersion)

// serve handles req if it is of the 2026 era and reports whether it did.
// It must stay cheap for 2025 requests: they are told apart by a header
// comparison and a substring search of params, without allocating.
func (w *modernWire) serve(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) bool {
	if !env.hasMethod() || (env.spec != nil && env.spec.not2026) {
		return false
	}
	hdr := &rc.Request.Header
	if len(hdr.Peek(headerSessionID)) > 0 {
		return false
	}
	hv := hdr.Peek(headerProtocolVersion)
	headerModern := len(hv) == len(wire2026.ProtocolVersion) && string(hv) >= wire2026.ProtocolVersion
	metaModern := env.params != nil && bytes.Contains(env.params, metaVersionKey)
	if !headerModern && !metaModern || env.method == methodInitialize && !metaModern {
		// (An initialize is of the 2026 era only when its _meta says so,
		// whatever its header.)
		return false
	}
	m, err := parseModernMeta(env.params)
	switch {
	case err != nil:
		w.fail(rc, info, env.id, 400, codeInvalidParams, "taskgate: invalid params._meta: "+err.Error(), nil)
		return true
	case env.method == notificationCancelled && !env.isRequest() && (headerModern || m.version == wire2026.ProtocolVersion):
		// (A notification declares nothing: no _meta is needed.)
		w.cancelled(rc, info, env)
		return true
	case m.version == "" && !env.isRequest():
		return false // a notification: nothing to check
	case m.version == "":
		w.fail(rc, info, env.id, 400, codeInvalidParams,
			`taskgate: params._meta["`+wire2026.MetaProtocolVersion+`"] is required at protocol version `+string(hv), nil)
		return true
	case m.version != string(hv):
		w.fail(rc, info, env.id, 400, wire2026.CodeHeaderMismatch, "taskgate: MCP-Protocol-Version header "+
			quoteOrMissing(hv)+` does not match params._meta["`+wire2026.MetaProtocolVersion+`"] "`+m.version+`"`, nil)
		return true
	case m.version != wire2026.ProtocolVersion:
		if isLegacyVersion(m.version) {
			return false
		}
		w.fail(rc, info, env.id, 400, wire2026.CodeUnsupportedVersion, "taskgate: protocol version "+
			jsonQuote(m.version)+" is not supported", wire2026.UnsupportedVersionData(m.version))
		return true
	case !m.hasCaps:
		w.fail(rc, info, env.id, 400, codeInvalidParams,
			`taskgate: params._meta["`+wire2026.MetaClientCapabilities+`"] is required`, nil)
		return true
	}
	if hm := hdr.Peek(wire2026.HeaderMethod); len(hm) > 0 && string(bytes.TrimSpace(hm)) != env.method {
		w.fail(rc, info, env.id, 400, wire2026.CodeHeaderMismatch,
			"taskgate: Mcp-Method header "+jsonQuote(string(hm))+" does not match the method "+jsonQuote(env.method), nil)
		return true
	}
	if h := w.h; h.native.Load() {
		h.pass(rc, info, env.id)
		return true
	}
	era, native, err := w.upstreamEra()
	if err != nil {
		w.h.upstreamFailed(rc, info, env.id, err)
		return true
	}
	if native {
		w.h.pass(rc, info, env.id)
		return true
	}
	info.method = env.method
	w.serveMethod(env.spec, rc, info, env, &m, era)
	return true
}

// logLevelRank orders the MCP log levels from debug (1) to emergency (8);
// 0 for anything else.
func logLevelRank(level string) int {
	switch level {
	case "debug":
		return 1
	case "info":
		return 2
	case "notice":
		return 3
	case "warning":
		return 4
	case "error":
		return 5
	case "critical":
		return 6
	case "alert":
		return 7
	case "emergency":
		return 8
	}
	return 0
}

// modernMethod reports whether method is a request a client may send at
// 2026-07-28 (with the tasks extension).
func modernMethod(method string) bool {
	switch method {
	case methodDiscover, methodToolsList, methodToolsCall, "prompts/list", "prompts/get", "resources/list",
		"resources/templates/list", "resources/read", "completion/complete", methodSubscriptionsListen,
		methodTasksGet, methodTasksUpdate, methodTasksCancel:
		return true
	}
	return false
}

// isLegacyVersion reports whether v is a published version older than
// 2026-07-28.
func isLegacyVersion(v string) bool {
	switch v {
	case "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25":
		return true
	}
	return false
}

func jsonQuote(s string) string { return string(appendJSONString(nil, s)) }

func quoteOrMissing(v []byte) string {
	if len(v) == 0 {
		return "(missing)"
	}
	return jsonQuote(string(v))
}

// parseModernMeta reads params._meta of a request. A missing _meta gives
// a zero modernMeta.
func parseModernMeta(params []byte) (modernMeta, error) {
	var m modernMeta
	if params == nil {
		return m, nil
	}
	vals, err := jsonx.Members(params, "_meta")
	if err != nil || vals[0] == nil || string(vals[0]) == "null" {
		return m, err
	}
	mv, err := jsonx.Members(vals[0], wire2026.MetaProtocolVersion, wire2026.MetaClientCapabilities, wire2026.MetaLogLevel)
	if err != nil {
		return m, err
	}
	if l, ok := jsonx.UnquoteValue(mv[2]); ok && logLevelRank(l) > 0 {
		m.logLevel = l
	}
	if mv[0] != nil {
		v, ok := jsonx.UnquoteValue(mv[0])
		if !ok {
			return m, errMetaVersion
		}
		m.version = v
	}
	if caps := mv[1]; caps != nil {
		if caps[0] != '{' {
			return m, errMetaCaps
		}
		m.hasCaps = true
		cv, err := jsonx.Members(caps, "extensions", "elicitation", "sampling", "roots")
		if err != nil {
			return m, err
		}
		m.elicitation = isObject(cv[1])
		if m.elicitation {
			ev, err := jsonx.Members(cv[1], "form", "url")
			if err != nil {
				return m, err
			}
			m.elicitURL = isObject(ev[1])
			m.elicitForm = isObject(ev[0]) || ev[0] == nil && ev[1] == nil
		}
		m.sampling = isObject(cv[2])
		m.roots = isObject(cv[3])
		if isObject(cv[0]) {
			ev, err := jsonx.Members(cv[0], wire2026.ExtensionTasks)
			if err != nil {
				return m, err
			}
			m.tasks = isObject(ev[0])
		}
	}
	return m, nil
}

func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

var (
	errMetaVersion = newRPCError(codeInvalidParams, "the protocol version must be a string")
	errMetaCaps    = newRPCError(codeInvalidParams, "the client capabilities must be an object")
)

// fail answers with an HTTP status and a JSON-RPC error carrying data.
func (w *modernWire) fail(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, status, code int, msg string, data []byte) {
	if info.outcome == "" {
		info.outcome = "rpc_error"
	}
	rc.Response.Reset()
	rc.SetStatusCode(status)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(wire2026.AppendError(nil, id, code, msg, data))
}

// headerName decodes the Mcp-Name header: surrounding whitespace is not
// part of the value, and a value of the form =?base64?...?= is the base64
// of a name that is not plain ASCII.
func headerName(v []byte) (string, bool) {
	s := strings.TrimSpace(string(v))
	if rest, ok := strings.CutPrefix(s, "=?base64?"); ok {
		enc, ok := strings.CutSuffix(rest, "?=")
		if !ok {
			return "", false
		}
		b, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	return s, true
}

// toolsCall serves a 2026 tools/call. A call that declares the tasks
// extension, to a tool the policy lets run as a task, becomes a task (see
// createTask). A required tool called without the extension is refused
// with -32021 and the upstream is not contacted. A legacy params.task has
// no meaning on this wire: it is ignored and not forwarded.
func (w *modernWire) toolsCall(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope, m *modernMeta, era int) {
	if env.id == nil || env.params == nil {
		w.fail(rc, info, env.id, 400, codeInvalidRequest, "taskgate: tools/call must be a request with params", nil)
		return
	}
	vals, err := jsonx.Members(env.params, "name", "requestState")
	if err != nil {
		w.fail(rc, info, env.id, 200, codeInvalidParams, "taskgate: invalid tools/call params: "+err.Error(), nil)
		return
	}
	name, ok := jsonx.UnquoteValue(vals[0])
	if !ok {
		w.fail(rc, info, env.id, 200, codeInvalidParams, "taskgate: tools/call params.name must be a string", nil)
		return
	}
	if hn := rc.Request.Header.Peek(wire2026.HeaderName); len(hn) > 0 {
		if n, ok := headerName(hn); !ok || n != name {
			w.fail(rc, info, env.id, 400, wire2026.CodeHeaderMismatch,
				"taskgate: Mcp-Name header does not match params.name "+jsonQuote(name), nil)
			return
		}
	}
	st := w.h.policy().For(name)
	if state, ok := jsonx.UnquoteValue(vals[1]); ok && strings.HasPrefix(state, requestStatePrefix) {
		w.resumeHeld(rc, info, env, name, state)
		return
	}
	if !m.tasks || st.TaskSupport == policy.Forbidden {
		switch {
		case st.TaskSupport == policy.Required:
			info.outcome = "task_required"
			w.fail(rc, info, env.id, 400, wire2026.CodeMissingCapability, "taskgate: tool "+jsonQuote(name)+
				" must run as a task: declare the extension "+wire2026.ExtensionTasks+" in the request's client capabilities",
				[]byte(wire2026.RequiredTasksData))
		case era == era2025 && st.TaskSupport != policy.Forbidden && (m.elicitation || m.sampling || m.roots):
			// A 2025 upstream asks its questions mid-call; a 2026 client
			// can only answer an InputRequiredResult and retry. The call
			// runs as a task the client never sees (createTask, plain).
			w.createTask(rc, info, env, name, st, m, era, true)
		default:
			w.plainCall(rc, info, env, m, era)
		}
		return
	}
	w.createTask(rc, info, env, name, st, m, era, false)
}
