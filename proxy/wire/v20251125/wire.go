// Package v20251125 serves the wire of MCP 2025-11-25, where tasks are
// part of the core protocol: initialize negotiates them per session,
// tools/call with params.task becomes a task, and tasks/get, tasks/result,
// tasks/list and tasks/cancel are answered from the task store and never
// forwarded. While a task's call runs, the upstream's notifications and
// requests reach the client through the task's tasks/result stream or a
// GET stream of any session of its owner, and the client's answers reach
// the upstream through the task's runner, on any replica.
//
// Clients of older revisions (and sessions that did not negotiate
// 2025-11-25) get the upstream as if taskgate were not there (T-11),
// except for the tool policy.
package v20251125

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/wire"
)

// Revision is the protocol revision this package serves.
const Revision = capability.ProtocolVersion

// Wire serves the 2025-11-25 wire for one front. It is safe for
// concurrent use.
type Wire struct {
	*wire.Front

	nativeOnce sync.Once
	ownOnce    sync.Once // logs once that the policy's ownTasks hides the upstream's tasks
	// sessionless: the upstream's last initialize answer had no
	// Mcp-Session-Id (a stateless server): its clients have no session
	// GET stream, so tasks/result also delivers a finished task's queued
	// messages (tasksMethod).
	sessionless atomic.Bool
	// warned holds the sessions already warned about a task call without
	// MCP-Protocol-Version (warnedOnce).
	warnedMu sync.Mutex
	warned   map[string]struct{}
}

// New returns the 2025-11-25 era of front f.
func New(f *wire.Front) wire.Era { return &Wire{Front: f} }

// Close has nothing to stop: the era runs no goroutines of its own.
func (w *Wire) Close() {}

// The era's column of the method table: what it does with each method
// it knows (any other passes through).
type column struct {
	serve handler
	// tasksOnly: served only in sessions that negotiated 2025-11-25
	// (tasksActive); in other sessions taskgate is not there for it.
	tasksOnly bool
	// needsID: the method must be a request; as a notification it is an
	// invalid request.
	needsID bool
}

// handler names the code that serves a method. Dispatch calls it through
// the switch of Serve, not through function values: an indirect
// call would make every request's envelope and info escape to the heap.
type handler uint8

const (
	none            handler = iota // passed through
	serveInitialize                // initialize
	serveToolsList                 // toolsList
	serveToolsCall                 // toolsCall
	serveTasks                     // tasksMethod
	serveCancelled                 // reservedID, else passed through
)

// columnOf returns the era's entry for method s (nil: unknown).
func columnOf(s *wire.Spec) column {
	if s == nil {
		return column{}
	}
	switch s.Name {
	case wire.MethodInitialize:
		return column{serve: serveInitialize}
	case wire.MethodToolsList:
		return column{serve: serveToolsList}
	case wire.MethodToolsCall:
		return column{serve: serveToolsCall}
	case wire.MethodTasksGet, wire.MethodTasksResult, wire.MethodTasksList, wire.MethodTasksCancel:
		return column{serve: serveTasks, tasksOnly: true, needsID: true}
	case wire.NotificationCancelled:
		return column{serve: serveCancelled}
	}
	return column{}
}

// Serve serves r (wire.Era): a GET resuming a tasks/result stream or
// opening a session's stream, a DELETE of a session with running tasks,
// a batch holding a method taskgate serves (refused), the client's answer
// to a task's question, and the methods of the era's column. Dispatch of
// one POSTed message, in this order:
//
//  1. A batch is passed through, unless one of its elements is refused in
//     batches (BatchOK false, see refusedInBatch): then the whole batch is
//     refused with 400 and -32600.
//  2. A response (the client answering a question of a task's call) in a
//     session with tasks goes to the task's runner (clientAnswer).
//  3. With an upstream that serves tasks natively everything but the
//     methods marked Always passes through.
//  4. The column's handler, unless none: only in sessions with tasks when
//     tasksOnly (else passed through), and a needsID method sent as a
//     notification is refused with 400 and -32600. Otherwise the message
//     passes through.
func (w *Wire) Serve(r *wire.Request) bool {
	rc, info, env := r.RC, &r.Info, &r.Env
	if !rc.IsPost() {
		return w.serveOther(rc, info)
	}
	if env.Kind == jsonx.KindBatch {
		for i := range env.Batch {
			if w.refusedInBatch(env.Batch[i].Spec, &rc.Request.Header) {
				info.Outcome = "batch_refused"
				wire.HTTPError(rc, fasthttp.StatusBadRequest, nil, wire.CodeInvalidRequest,
					"taskgate: "+env.Batch[i].Method+" cannot be sent in a batch")
				return true
			}
		}
		return false
	}
	if env.IsResponse() && env.ID != nil && !w.Native.Load() &&
		tasksActive(&rc.Request.Header) && w.clientAnswer(rc, info, env) {
		return true // E-35: the answer to a relayed request went to its task's runner
	}
	spec := env.Spec
	col := columnOf(spec)
	switch {
	case w.Native.Load() && (spec == nil || !spec.Always),
		col.serve == none:
		return false
	case col.tasksOnly && !tasksActive(&rc.Request.Header):
		// A session not at 2025-11-25 has no tasks from taskgate: the
		// upstream answers as if taskgate were not there (T-11).
		return false
	case col.needsID && !env.IsRequest():
		info.Outcome = "invalid"
		wire.HTTPError(rc, fasthttp.StatusBadRequest, nil, wire.CodeInvalidRequest, "taskgate: "+env.Method+" must be a request with an id")
		return true
	}
	switch col.serve {
	case serveInitialize:
		w.initialize(rc, info, env)
	case serveToolsList:
		w.toolsList(rc, info, env)
	case serveToolsCall:
		w.toolsCall(rc, info, env)
	case serveTasks:
		w.tasksMethod(rc, info, env)
	case serveCancelled:
		return w.reservedID(rc, info, env)
	}
	return true
}

// serveOther serves a GET or DELETE of the MCP endpoint when it is this
// era's: the session's tasks still run (a deferred DELETE), a resumed
// tasks/result stream, a session's GET stream merged with its task
// messages.
func (w *Wire) serveOther(rc *fasthttp.RequestCtx, info *wire.Info) bool {
	hdr := &rc.Request.Header
	if rc.IsDelete() && tasksActive(hdr) && w.DeleteSession(rc, info) {
		return true // the session's tasks still run: it ends upstream after them
	}
	if !rc.IsGet() || w.Native.Load() {
		return false
	}
	if taskID, rpcID, ok := parseResultEventID(string(hdr.Peek(wire.HeaderLastEventID))); ok {
		info.Method, info.TaskID = wire.MethodTasksResult, taskID
		w.resumeResult(rc, info, taskID, rpcID)
		return true
	}
	// A session's GET stream, or, in front of an upstream without
	// sessions, the GET stream of a client that identifies itself
	// (Authorization: its own tasks only). Without either the stream
	// would merge the tasks of every anonymous caller.
	if tasksActive(hdr) && (len(hdr.Peek(wire.HeaderSessionID)) > 0 ||
		len(hdr.Peek(fasthttp.HeaderAuthorization)) > 0) {
		info.Method = wire.MetricGetStream
		w.getStream(rc, info)
		return true
	}
	return false
}

// refusedInBatch reports whether a batch element of method entry s (nil
// for an unknown method) makes taskgate refuse the batch.
func (w *Wire) refusedInBatch(s *wire.Spec, hdr *fasthttp.RequestHeader) bool {
	if s == nil || s.BatchOK {
		return false
	}
	return s.Always || (!w.Native.Load() && tasksActive(hdr))
}

// reservedID swallows a client's notifications/cancelled aimed at an id in
// taskgate's upstream namespace: tasks are cancelled with tasks/cancel only
// (T-61). Upstream ids are random, so a client cannot name one anyway;
// this is defence in depth. Client requests with such ids pass: they cannot
// collide with a random id. It reports whether it answered.
func (w *Wire) reservedID(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) bool {
	if env.ID != nil || env.Params == nil {
		return false
	}
	vals, err := jsonx.Members(env.Params, "requestId")
	if err != nil {
		return false
	}
	if id, ok := jsonx.UnquoteValue(vals[0]); ok && strings.HasPrefix(id, wire.UpstreamIDPrefix) {
		info.Outcome = "ignored"
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return true
	}
	return false
}

// tasksActive reports whether the request belongs to a session that
// negotiated 2025-11-25 with the client (natively or bridged): only such
// sessions have tasks (Q-12, L-05). Others are served as if taskgate were
// not there (T-11).
func tasksActive(hdr *fasthttp.RequestHeader) bool {
	return string(hdr.Peek(wire.HeaderProtocolVersion)) == capability.ProtocolVersion
}
