package v20260728

import (
	"bytes"
	"encoding/base64"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire/v20260728/schema"
)

// The MCP 2026-07-28 wire (package schema renders it). Requests of that
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

// Wire serves the 2026-07-28 wire for one front. It is safe for concurrent
// use.
type Wire struct {
	*wire.Front
	// bg holds the era's housekeeping goroutines (the reaper, the listeners).
	bg sync.WaitGroup
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
	// notifications/cancelled can reach (cancel.go).
	calls inflightCalls
}

// Upstream eras.
const (
	era2025 = 2025
	era2026 = 2026
)

// defaultPromoteWindow is Wire.window unless Config.PromoteWindow.
const defaultPromoteWindow = 250 * time.Millisecond

func newWire(f *wire.Front) *Wire {
	w := &Wire{Front: f, window: defaultPromoteWindow}
	if f.Config.PromoteWindow > 0 {
		w.window = f.Config.PromoteWindow
	}
	w.sessions.init(w, 1024, 5*time.Minute)
	return w
}

// reqMeta is what a 2026 request's params._meta says.
type reqMeta struct {
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

var metaVersionKey = []byte(schema.MetaProtocolVersion)

// serve handles req if it is of the 2026 era and reports whether it did.
// It must stay cheap for 2025 requests: they are told apart by a header
// comparison and a substring search of params, without allocating.
func (w *Wire) serve(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) bool {
	if !env.HasMethod() || (env.Spec != nil && false) {
		return false
	}
	hdr := &rc.Request.Header
	if len(hdr.Peek(wire.HeaderSessionID)) > 0 {
		return false
	}
	hv := hdr.Peek(wire.HeaderProtocolVersion)
	header2026 := len(hv) == len(schema.ProtocolVersion) && string(hv) >= schema.ProtocolVersion
	meta2026 := env.Params != nil && bytes.Contains(env.Params, metaVersionKey)
	if !header2026 && !meta2026 || env.Method == wire.MethodInitialize && !meta2026 {
		// (An initialize is of the 2026 era only when its _meta says so,
		// whatever its header.)
		return false
	}
	m, err := parseMeta(env.Params)
	switch {
	case err != nil:
		fail(rc, info, env.ID, 400, wire.CodeInvalidParams, "taskgate: invalid params._meta: "+err.Error(), nil)
		return true
	case env.Method == wire.NotificationCancelled && !env.IsRequest() && (header2026 || m.version == schema.ProtocolVersion):
		// (A notification declares nothing: no _meta is needed.)
		w.cancelled(rc, info, env)
		return true
	case m.version == "" && !env.IsRequest():
		return false // a notification: nothing to check
	case m.version == "":
		fail(rc, info, env.ID, 400, wire.CodeInvalidParams,
			`taskgate: params._meta["`+schema.MetaProtocolVersion+`"] is required at protocol version `+string(hv), nil)
		return true
	case m.version != string(hv):
		fail(rc, info, env.ID, 400, schema.CodeHeaderMismatch, "taskgate: MCP-Protocol-Version header "+
			quoteOrMissing(hv)+` does not match params._meta["`+schema.MetaProtocolVersion+`"] "`+m.version+`"`, nil)
		return true
	case m.version != schema.ProtocolVersion:
		if isLegacyVersion(m.version) {
			return false
		}
		fail(rc, info, env.ID, 400, schema.CodeUnsupportedVersion, "taskgate: protocol version "+
			jsonQuote(m.version)+" is not supported", schema.UnsupportedVersionData(m.version))
		return true
	case !m.hasCaps:
		fail(rc, info, env.ID, 400, wire.CodeInvalidParams,
			`taskgate: params._meta["`+schema.MetaClientCapabilities+`"] is required`, nil)
		return true
	}
	if hm := hdr.Peek(schema.HeaderMethod); len(hm) > 0 && string(bytes.TrimSpace(hm)) != env.Method {
		fail(rc, info, env.ID, 400, schema.CodeHeaderMismatch,
			"taskgate: Mcp-Method header "+jsonQuote(string(hm))+" does not match the method "+jsonQuote(env.Method), nil)
		return true
	}
	if w.Native.Load() {
		w.Pass(rc, info, env.ID)
		return true
	}
	era, native, err := w.upstreamEra()
	if err != nil {
		w.UpstreamFailed(rc, info, env.ID, err)
		return true
	}
	if native {
		w.Pass(rc, info, env.ID)
		return true
	}
	info.Method = env.Method
	w.serveMethod(env.Spec, rc, info, env, &m, era)
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

// methodAt2026 reports whether method is a request a client may send at
// 2026-07-28 (with the tasks extension).
func methodAt2026(method string) bool {
	switch method {
	case wire.MethodDiscover, wire.MethodToolsList, wire.MethodToolsCall, "prompts/list", "prompts/get", "resources/list",
		"resources/templates/list", "resources/read", "completion/complete", wire.MethodSubscriptionsListen,
		wire.MethodTasksGet, wire.MethodTasksUpdate, wire.MethodTasksCancel:
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

func jsonQuote(s string) string { return string(wire.AppendJSONString(nil, s)) }

func quoteOrMissing(v []byte) string {
	if len(v) == 0 {
		return "(missing)"
	}
	return jsonQuote(string(v))
}

// parseMeta reads params._meta of a request. A missing _meta gives
// a zero reqMeta.
func parseMeta(params []byte) (reqMeta, error) {
	var m reqMeta
	if params == nil {
		return m, nil
	}
	vals, err := jsonx.Members(params, "_meta")
	if err != nil || vals[0] == nil || string(vals[0]) == "null" {
		return m, err
	}
	mv, err := jsonx.Members(vals[0], schema.MetaProtocolVersion, schema.MetaClientCapabilities, schema.MetaLogLevel)
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
			ev, err := jsonx.Members(cv[0], schema.ExtensionTasks)
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
	errMetaVersion = wire.NewError(wire.CodeInvalidParams, "the protocol version must be a string")
	errMetaCaps    = wire.NewError(wire.CodeInvalidParams, "the client capabilities must be an object")
)

// fail answers with an HTTP status and a JSON-RPC error carrying data.
func fail(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, status, code int, msg string, data []byte) {
	if info.Outcome == "" {
		info.Outcome = "rpc_error"
	}
	rc.Response.Reset()
	rc.SetStatusCode(status)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(wire.AppendErrorData(nil, id, code, msg, data))
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
func (w *Wire) toolsCall(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, era int) {
	if env.ID == nil || env.Params == nil {
		fail(rc, info, env.ID, 400, wire.CodeInvalidRequest, "taskgate: tools/call must be a request with params", nil)
		return
	}
	vals, err := jsonx.Members(env.Params, "name", "requestState")
	if err != nil {
		fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: invalid tools/call params: "+err.Error(), nil)
		return
	}
	name, ok := jsonx.UnquoteValue(vals[0])
	if !ok {
		fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: tools/call params.name must be a string", nil)
		return
	}
	if hn := rc.Request.Header.Peek(schema.HeaderName); len(hn) > 0 {
		if n, ok := headerName(hn); !ok || n != name {
			fail(rc, info, env.ID, 400, schema.CodeHeaderMismatch,
				"taskgate: Mcp-Name header does not match params.name "+jsonQuote(name), nil)
			return
		}
	}
	st := w.Policy().For(name)
	if state, ok := jsonx.UnquoteValue(vals[1]); ok && strings.HasPrefix(state, requestStatePrefix) {
		w.resumeHeld(rc, info, env, name, state)
		return
	}
	if !m.tasks || st.TaskSupport == policy.Forbidden {
		switch {
		case st.TaskSupport == policy.Required:
			info.Outcome = "task_required"
			fail(rc, info, env.ID, 400, schema.CodeMissingCapability, "taskgate: tool "+jsonQuote(name)+
				" must run as a task: declare the extension "+schema.ExtensionTasks+" in the request's client capabilities",
				[]byte(schema.RequiredTasksData))
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
