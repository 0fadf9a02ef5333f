package proxy

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire2026"
)

// The 2026-07-28 era's side of the seam (package wire): its column of the
// method table, its Serve and Close, and its side of a background call.

// handler names the code that serves a method on the 2026 wire. Dispatch
// calls it through the switch of modernWire.serveMethod, not through
// function values: an indirect call would make the request's envelope and
// info escape to the heap.
type handler uint8

const (
	none            handler = iota // forwarded to the upstream (modernWire.forward)
	serveToolsCall                 // modernWire.toolsCall
	serveTasks                     // modernWire.tasksMethod
	serveDiscover                  // modernWire.discover
	serveNotIn2026                 // 404: a 2025 method the 2026 wire does not have
	serveLegacyOnly                // 404 in front of a 2025 upstream, which has the method (M-30); else forwarded
	serveListen                    // modernWire.listen
)

// column2026 is the 2026 era's column of the method table.
func column2026(s *wire.Spec) handler {
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

// newEra2026 returns the 2026 era of h, its reaper of bridge sessions
// started.
func newEra2026(h *Handler) wire.Era {
	w := newModernWire(h)
	h.bg.Add(1)
	go w.reapLoop()
	return w
}

// Serve serves r if it is of the 2026 era (wire.Era).
func (w *modernWire) Serve(r *wire.Request) bool { return w.serve(r.RC, &r.Info, &r.Env) }

// Close stops the era's reaper of bridge sessions and waits for it.
func (w *modernWire) Close() { w.h.bg.Wait() }

// call26 is the 2026 era's side of a background call (wire.Call).
type call26 struct {
	w  *modernWire
	mj *modernJob
}

// modernOf returns the 2026-wire part of a job of this era.
func modernOf(j *wire.Job) *modernJob { return j.Call.(*call26).mj }

// Run runs the call: one or more rounds with a 2026 upstream, or one call
// of a 2025 upstream.
func (c *call26) Run(ctx context.Context, j *wire.Job) engine.Result { return c.w.h.callModern(ctx, j) }

// Notification: progress becomes the task's statusMessage; the 2026 wire
// has no notifications on tasks, so only a plain call's client takes them
// on its answer.
func (c *call26) Notification(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	if env.Method == wire.MethodProgress {
		c.w.h.f.Eng.Progress(ctx, &j.Job, wire.ProgressText(env.Params))
	}
	c.mj.notify(env, msg)
}

// Request makes an upstream request a question of the task.
func (c *call26) Request(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	c.w.h.modernQuestion(ctx, j, env, msg)
}

// Answers hands the answers of tasks/update to the upstream.
func (c *call26) Answers(ctx context.Context, j *wire.Job) { c.w.h.modernAnswers(ctx, j) }

// Stopped tells a 2025 upstream with notifications/cancelled; a 2026
// upstream learns it from the closed request stream.
func (c *call26) Stopped(j *wire.Job, reason string) {
	if c.mj.era == era2026 {
		return
	}
	c.w.h.f.NotifyCancelled(j, reason)
}

// End has nothing to release here (the call gives its bridge session back
// itself).
func (c *call26) End(*wire.Job) {}

// serveMethod runs the 2026-wire handler of s, or forwards the message
// (era: the upstream's era).
func (w *modernWire) serveMethod(s *wire.Spec, rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *modernMeta, era int) {
	switch column2026(s) {
	case serveToolsCall:
		w.toolsCall(rc, info, env, m, era)
	case serveTasks:
		w.tasksMethod(rc, info, env, m)
	case serveNotIn2026:
		w.fail(rc, info, env.ID, 404, wire.CodeMethodNotFound,
			"taskgate: "+env.Method+" does not exist at protocol version "+wire2026.ProtocolVersion+"; tasks/get carries the result", nil)
	case serveDiscover:
		w.discover(rc, info, env, era)
	case serveListen:
		w.listen(rc, info, env, m, era)
	case serveLegacyOnly:
		if era == era2025 {
			w.fail(rc, info, env.ID, 404, wire.CodeMethodNotFound,
				"taskgate: "+env.Method+" does not exist at protocol version "+wire2026.ProtocolVersion, nil)
			return
		}
		w.forward(rc, info, env, m, era)
	default:
		w.forward(rc, info, env, m, era)
	}
}
