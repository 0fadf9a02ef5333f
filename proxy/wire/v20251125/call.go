package v20251125

import (
	"context"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/wire"
)

// call is this era's side of a background task call (wire.Call): the
// upstream's notifications and requests are stamped with related-task
// _meta and queued for the client's streams (streams.go), the client's
// answers go upstream under the upstream's own ids, and a stop is told
// with notifications/cancelled. It keeps no per-call state: every job of
// this era shares the Wire's one call.
type call struct{ w *Wire }

var (
	_ wire.Call   = call{}
	_ wire.Sender = call{}
)

// Send writes the call's request before Run (wire.Sender).
func (c call) Send(ctx context.Context, j *wire.Job) { c.w.SendEarly(ctx, j) }

// Run sends the call's request once (unless Send did) and classifies the
// answer.
func (c call) Run(ctx context.Context, j *wire.Job) engine.Result {
	return c.w.CallUpstreamOnce(ctx, j)
}

// Notification queues an upstream notification of the call for the
// client.
func (c call) Notification(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	c.w.relayNotification(ctx, j, env, msg)
}

// Request forwards an upstream request to the client.
func (c call) Request(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	c.w.relayRequest(ctx, j, env, msg)
}

// Answers posts the client's answers from the task's inbox upstream.
func (c call) Answers(ctx context.Context, j *wire.Job) { c.w.deliverAnswers(ctx, j) }

// Stopped tells the upstream to stop the call (P-06, E-26).
func (c call) Stopped(j *wire.Job, reason string) { c.w.NotifyCancelled(j, reason) }

// End has nothing to release: the call keeps no state of its own.
func (c call) End(*wire.Job) {}
