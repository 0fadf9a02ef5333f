package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/wire2026"
)

// The method table: every JSON-RPC method taskgate knows by name, what it
// does with it on each wire, and its metric label. ServeFastHTTP's dispatch
// (handler.go), the batch check, the 2026 wire's dispatch (modernWire.serve)
// and the metric labels (metricMethod) all read it; nothing else decides
// which methods taskgate serves itself. Adding a method is one entry here
// plus its handler (and, for a new handler, its case in serveMethod).
//
// Dispatch of one client message (ServeFastHTTP), in this order:
//
//  1. A batch is passed through, unless one of its elements is refused in
//     batches (batchOK false, see refusedInBatch): then the whole batch is
//     refused with 400 and -32600.
//  2. The 2026 wire (modernWire.serve) takes requests and notifications of
//     2026-era clients (not2026 methods never are): serve26, or forwarded to
//     the upstream when serve26 is none.
//  3. A response (the client answering a question of a task's call) in a
//     session with tasks goes to the task's runner (clientAnswer).
//  4. With an upstream that serves tasks natively everything but the
//     methods marked always passes through.
//  5. serve, unless none: only in sessions with tasks when tasksOnly (else
//     passed through), and a needsID method sent as a notification is
//     refused with 400 and -32600. Otherwise the message passes through.

// JSON-RPC method names taskgate routes on.
const (
	methodInitialize  = "initialize"
	methodToolsList   = "tools/list"
	methodToolsCall   = "tools/call"
	methodTasksGet    = "tasks/get"
	methodTasksResult = "tasks/result"
	methodTasksList   = "tasks/list"
	methodTasksCancel = "tasks/cancel"
	methodPing        = "ping"

	// Methods of the 2026 wire that the 2025 wire does not have.
	methodDiscover    = "server/discover"
	methodTasksUpdate = "tasks/update"
	// methodSubscriptionsListen opens a stream of the notifications a
	// client asks for (list changes, resource updates, task status).
	methodSubscriptionsListen = "subscriptions/listen"

	// methodLogMessage is a log message from the server.
	methodLogMessage = "notifications/message"

	notificationCancelled = "notifications/cancelled"
)

// methodSpec is one entry of the method table.
type methodSpec struct {
	name   string
	metric string // the method's label in metrics (method="...")

	// The 2025-11-25 wire, and clients of older versions.

	// serve handles the message (Handler.serveMethod); none: it passes
	// through to the upstream.
	serve handler
	// tasksOnly: served only in sessions that negotiated 2025-11-25
	// (tasksActive); in other sessions taskgate is not there for it.
	tasksOnly bool
	// needsID: the method must be a request; as a notification it is an
	// invalid request.
	needsID bool
	// always: served even when the upstream has tasks natively (others
	// then pass through), and refused in a batch of any session.
	always bool
	// batchOK: the method may be sent in a batch. A method taskgate serves
	// cannot be (it answers single messages): a batch holding one is
	// refused in sessions with tasks unless the upstream has tasks
	// natively (always: in every session).
	batchOK bool

	// The 2026-07-28 wire.

	// not2026: never a 2026-era message; the 2025 dispatch serves it.
	not2026 bool
	// serve26 handles a 2026-era message (modernWire.serveMethod); none:
	// forwarded to the upstream (modernWire.forward).
	serve26 handler
}

// handler names the code that serves a method on one wire. Dispatch calls
// it through the switches of Handler.serveMethod and modernWire.serveMethod,
// not through function values: an indirect call would make every request's
// envelope and reqInfo escape to the heap (two allocations per request,
// three on the 2026 wire).
type handler uint8

const (
	none            handler = iota // no handler: passed through (2025) or forwarded (2026)
	serveInitialize                // Handler.initialize
	serveToolsList                 // Handler.toolsList
	serveToolsCall                 // Handler.toolsCall, modernWire.toolsCall
	serveTasks                     // Handler.tasksMethod, modernWire.tasksMethod
	serveCancelled                 // reservedID, else passed through
	serveDiscover                  // modernWire.discover
	serveNotIn2026                 // 404: a 2025 method the 2026 wire does not have
	serveLegacyOnly                // 404 in front of a 2025 upstream, which has the method (M-30); else forwarded
	serveListen                    // modernWire.listen
)

// methods is the method table.
var methods = [...]methodSpec{
	// Served by taskgate.
	// A 2025 initialize names no 2026 protocol version and is never a
	// 2026-era message; one that does is a 2026 request for a method that
	// revision removed.
	{name: methodInitialize, metric: methodInitialize,
		serve: serveInitialize, always: true, serve26: serveLegacyOnly},
	{name: methodToolsList, metric: methodToolsList,
		serve: serveToolsList},
	{name: methodToolsCall, metric: methodToolsCall,
		serve: serveToolsCall, serve26: serveToolsCall},
	{name: methodTasksGet, metric: methodTasksGet,
		serve: serveTasks, tasksOnly: true, needsID: true, serve26: serveTasks},
	{name: methodTasksResult, metric: methodTasksResult,
		serve: serveTasks, tasksOnly: true, needsID: true, serve26: serveNotIn2026},
	{name: methodTasksList, metric: methodTasksList,
		serve: serveTasks, tasksOnly: true, needsID: true, serve26: serveNotIn2026},
	{name: methodTasksCancel, metric: methodTasksCancel,
		serve: serveTasks, tasksOnly: true, needsID: true, serve26: serveTasks},
	{name: methodTasksUpdate, metric: methodTasksUpdate,
		batchOK: true, serve26: serveTasks},
	{name: methodDiscover, metric: methodDiscover,
		batchOK: true, serve26: serveDiscover},
	{name: methodSubscriptionsListen, metric: methodSubscriptionsListen,
		batchOK: true, serve26: serveListen},
	// A notifications/cancelled naming an id of taskgate's own upstream
	// requests is swallowed (reservedID); any other passes through.
	{name: notificationCancelled, metric: notificationCancelled,
		serve: serveCancelled, batchOK: true},

	// Passed through; known by name only for their metric label.
	{name: methodPing, metric: methodPing, batchOK: true, serve26: serveLegacyOnly},
	{name: "notifications/initialized", metric: "notifications/initialized", batchOK: true},
	{name: "notifications/progress", metric: "notifications/progress", batchOK: true},
	{name: "notifications/roots/list_changed", metric: "notifications/roots/list_changed", batchOK: true},
	{name: "resources/list", metric: "resources/list", batchOK: true},
	{name: "resources/read", metric: "resources/read", batchOK: true},
	{name: "resources/templates/list", metric: "resources/templates/list", batchOK: true},
	{name: "prompts/list", metric: "prompts/list", batchOK: true},
	{name: "prompts/get", metric: "prompts/get", batchOK: true},
	{name: "completion/complete", metric: "completion/complete", batchOK: true},
	{name: "logging/setLevel", metric: "logging/setLevel", batchOK: true, serve26: serveLegacyOnly},
	{name: "resources/subscribe", metric: "resources/subscribe", batchOK: true, serve26: serveLegacyOnly},
	{name: "resources/unsubscribe", metric: "resources/unsubscribe", batchOK: true, serve26: serveLegacyOnly},
}

// methodBuckets indexes the table by a hash of a name's length and two of
// its bytes: a lookup compares one name, mostly, so the envelope parser
// finds the entry about as cheaply as with a string switch (a map's
// hashing costs ten times that). It is filled by init, not by an
// initializer: the handlers reached from the table use lookupMethod, and an
// initializer would be an initialization cycle.
var methodBuckets [128][]*methodSpec

// methodBucket is the bucket of a name of length n whose last and middle
// bytes are last and mid.
func methodBucket(n int, last, mid byte) int {
	return (n + int(last)*3 + int(mid)*7) & (len(methodBuckets) - 1)
}

func init() {
	for i := range methods {
		s := &methods[i]
		n := len(s.name)
		k := methodBucket(n, s.name[n-1], s.name[n/2])
		methodBuckets[k] = append(methodBuckets[k], s)
	}
}

// lookupMethod returns the entry of method m, or nil. It does not
// allocate.
func lookupMethod(m []byte) *methodSpec {
	n := len(m)
	if n == 0 {
		return nil
	}
	for _, s := range methodBuckets[methodBucket(n, m[n-1], m[n/2])] {
		if string(m) == s.name {
			return s
		}
	}
	return nil
}

// lookupMethodString is lookupMethod for a string.
func lookupMethodString(m string) *methodSpec {
	n := len(m)
	if n == 0 {
		return nil
	}
	for _, s := range methodBuckets[methodBucket(n, m[n-1], m[n/2])] {
		if m == s.name {
			return s
		}
	}
	return nil
}

// refusedInBatch reports whether a batch element of method entry s (nil
// for an unknown method) makes taskgate refuse the batch.
func (h *Handler) refusedInBatch(s *methodSpec, hdr *fasthttp.RequestHeader) bool {
	if s == nil || s.batchOK {
		return false
	}
	return s.always || (!h.native.Load() && h.tasksActive(hdr))
}

// Pseudo-method labels of requests that carry no single method.
const (
	metricNoMethod  = ""           // a message without a method (a response)
	metricBatch     = "batch"      // a batch
	metricGetStream = "get_stream" // a GET of the session's SSE stream
)

// metricMethod bounds label cardinality: client-chosen method names are not
// used as labels unless they are in the method table.
func metricMethod(m string) string {
	switch m {
	case metricNoMethod, metricBatch, metricGetStream:
		return m
	}
	if s := lookupMethodString(m); s != nil {
		return s.metric
	}
	return "other"
}

// serveMethod runs the 2025-wire handler of s (s.serve is not none).
func (h *Handler) serveMethod(s *methodSpec, rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	switch s.serve {
	case serveInitialize:
		h.initialize(rc, info, env)
	case serveToolsList:
		h.toolsList(rc, info, env)
	case serveToolsCall:
		h.toolsCall(rc, info, env)
	case serveTasks:
		h.tasksMethod(rc, info, env)
	case serveCancelled:
		if !h.reservedID(rc, info, env) {
			h.pass(rc, info, env.id)
		}
	default:
		h.pass(rc, info, env.id)
	}
}

// serveMethod runs the 2026-wire handler of s, or forwards the message
// (era: the upstream's era).
func (w *modernWire) serveMethod(s *methodSpec, rc *fasthttp.RequestCtx, info *reqInfo, env *envelope, m *modernMeta, era int) {
	var k handler
	if s != nil {
		k = s.serve26
	}
	switch k {
	case serveToolsCall:
		w.toolsCall(rc, info, env, m, era)
	case serveTasks:
		w.tasksMethod(rc, info, env, m)
	case serveNotIn2026:
		w.fail(rc, info, env.id, 404, codeMethodNotFound,
			"taskgate: "+env.method+" does not exist at protocol version "+wire2026.ProtocolVersion+"; tasks/get carries the result", nil)
	case serveDiscover:
		w.discover(rc, info, env, m, era)
	case serveListen:
		w.listen(rc, info, env, m, era)
	case serveLegacyOnly:
		if era == era2025 {
			w.fail(rc, info, env.id, 404, codeMethodNotFound,
				"taskgate: "+env.method+" does not exist at protocol version "+wire2026.ProtocolVersion, nil)
			return
		}
		w.forward(rc, info, env, m, era)
	default:
		w.forward(rc, info, env, m, era)
	}
}
