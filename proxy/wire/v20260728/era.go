package v20260728

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire/v20260728/schema"
)

// The 2026-07-28 era's side of the seam (package wire): its column of the
// method table, its Serve and Close, and its side of a background call.

// handler names the code that serves a method on the 2026 wire. Dispatch
// calls it through the switch of Wire.serveMethod, not through
// function values: an indirect call would make the request's envelope and
// info escape to the heap.
type handler uint8

const (
	none            handler = iota // forwarded to the upstream (Wire.forward)
	serveToolsCall                 // Wire.toolsCall
	serveTasks                     // Wire.tasksMethod
	serveDiscover                  // Wire.discover
	serveNotIn2026                 // 404: a 2025 method the 2026 wire does not have
	serveLegacyOnly                // 404 in front of a 2025 upstream, which has the method (M-30); else forwarded
	serveListen                    // Wire.listen
)

// columnOf is the 2026 era's column of the method table.
func columnOf(s *wire.Spec) handler {
	if s == nil {
		return none
	}
	switch s.Name {
	case wire.MethodToolsCall:
		return serveToolsCall
	case wire.MethodTasksGet, wire.MethodTasksCancel, wire.MethodTasksUpdate:
		return serveTasks
	case wire.MethodTasksResult, wire.MethodTasksList:
		return serveNotIn2026
	case wire.MethodDiscover:
		return serveDiscover
	case wire.MethodSubscriptionsListen:
		return serveListen
	// A 2025 initialize names no 2026 protocol version and is never a
	// 2026-era message; one that does is a 2026 request for a method
	// that revision removed.
	case wire.MethodInitialize, wire.MethodPing, "logging/setLevel", "resources/subscribe", "resources/unsubscribe":
		return serveLegacyOnly
	}
	return none
}

// New returns the 2026-07-28 era of front f, its reaper of bridge
// sessions started (Close waits for it; it ends with f.Root).
func New(f *wire.Front) wire.Era {
	w := newWire(f)
	w.bg.Add(1)
	go w.reapLoop()
	return w
}

// Serve serves r if it is of the 2026 era (wire.Era).
func (w *Wire) Serve(r *wire.Request) bool { return w.serve(r.RC, &r.Info, &r.Env) }

// Close stops the era's reaper of bridge sessions and waits for it.
func (w *Wire) Close() { w.bg.Wait() }

// call is the 2026 era's side of a background call (wire.Call).
type call struct {
	w  *Wire
	mj *callState
}

// stateOf returns the 2026-wire part of a job of this era.
func stateOf(j *wire.Job) *callState { return j.Call.(*call).mj }

// Run runs the call: one or more rounds with a 2026 upstream, or one call
// of a 2025 upstream.
func (c *call) Run(ctx context.Context, j *wire.Job) engine.Result { return c.runCall(ctx, j) }

// Notification: progress becomes the task's statusMessage; the 2026 wire
// has no notifications on tasks, so only a plain call's client takes them
// on its answer.
func (c *call) Notification(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	if env.Method == wire.MethodProgress {
		c.w.Eng.Mail.Progress(ctx, &j.Job, wire.ProgressText(env.Params))
	}
	c.mj.notify(env, msg)
}

// Request makes an upstream request a question of the task.
func (c *call) Request(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	c.relayQuestion(ctx, j, env, msg)
}

// Answers hands the answers of tasks/update to the upstream.
func (c *call) Answers(ctx context.Context, j *wire.Job) { c.deliverAnswers(ctx, j) }

// Stopped tells a 2025 upstream with notifications/cancelled; a 2026
// upstream learns it from the closed request stream.
func (c *call) Stopped(j *wire.Job, reason string) {
	if c.mj.era == era2026 {
		return
	}
	c.w.NotifyCancelled(j, reason)
}

// End has nothing to release here (the call gives its bridge session back
// itself).
func (c *call) End(*wire.Job) {}

// serveMethod runs the 2026-wire handler of s, or forwards the message
// (era: the upstream's era).
func (w *Wire) serveMethod(s *wire.Spec, rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, era int) {
	switch columnOf(s) {
	case serveToolsCall:
		w.toolsCall(rc, info, env, m, era)
	case serveTasks:
		w.tasksMethod(rc, info, env, m)
	case serveNotIn2026:
		fail(rc, info, env.ID, 404, wire.CodeMethodNotFound,
			"taskgate: "+env.Method+" does not exist at protocol version "+schema.ProtocolVersion+"; tasks/get carries the result", nil)
	case serveDiscover:
		w.discover(rc, info, env, m, era)
	case serveListen:
		w.listen(rc, info, env, m, era)
	case serveLegacyOnly:
		if era == era2025 {
			fail(rc, info, env.ID, 404, wire.CodeMethodNotFound,
				"taskgate: "+env.Method+" does not exist at protocol version "+schema.ProtocolVersion, nil)
			return
		}
		w.forward(rc, info, env, m, era)
	default:
		w.forward(rc, info, env, m, era)
	}
}

// InFlight reports how many bridged plain calls are running that a
// client's notifications/cancelled can reach (cancel.go).
func (w *Wire) InFlight() int { return w.calls.len() }
