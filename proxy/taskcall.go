package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/upstream"
)

// job is a task call as the wires and their upstream client see it: the
// engine's job (task, policy, supervision, outcome) and what the engine
// does not know: the upstream request, owned by the runner, and the
// 2026 wire's per-call state. Its engine.Job.Call points back to it.
type job struct {
	engine.Job
	// req is the upstream request; a 2025-era call releases it once it
	// is written (nil then).
	req *fasthttp.Request
	// hdr is req's headers as wire bytes, copied before the call starts,
	// for the messages sent beside it (answers, cancels, the session's
	// end): req itself belongs to the goroutine writing the call. Bytes,
	// parsed again by header when such a message is sent, because a call
	// may wait for minutes, thousands at once, and a parsed copy costs
	// about three times as much memory per call.
	hdr    []byte
	modern *modernJob // set for tasks created on the 2026-07-28 wire
	// span is the call's trace span (nil when not traced); set before the
	// task is stored, ended by Ended.
	span trace.Span
	// sent and sendErr are what taskUpstream.Send left for Call: the
	// 2025-era call's request written, or why writing it failed.
	sent    *upstream.Call
	sendErr error
}

// jobOf returns the job whose engine part is ej.
func jobOf(ej *engine.Job) *job { return ej.Call.(*job) }

// localJob returns owner's task call taskID when it runs in this process.
func (h *Handler) localJob(owner, taskID string) *job {
	if ej := h.eng.LocalJob(owner, taskID); ej != nil {
		return jobOf(ej)
	}
	return nil
}

// callResult is the upstream outcome of one call.
type callResult = engine.Result

// taskUpstream runs the engine's task calls on this Handler's upstream
// (engine.Upstream): the 2025-era calls (sendCall, with the
// messages of their SSE answers) and the 2026 wire's (callModern).
type taskUpstream struct{ h *Handler }

// Begin copies the request's headers for the messages sent beside the
// call (supervisor and runner may send them while the call is written).
func (u *taskUpstream) Begin(ej *engine.Job) {
	j := jobOf(ej)
	j.hdr = j.req.Header.AppendBytes(nil)
}

// header parses the call's headers (hdr) into dst.
func (j *job) header(dst *fasthttp.RequestHeader) error {
	if err := dst.Read(bufio.NewReaderSize(bytes.NewReader(j.hdr), len(j.hdr))); err != nil {
		return fmt.Errorf("reading the call's copied request headers: %w", err)
	}
	return nil
}

// Send writes a 2025-era call's request and releases it, as the call may
// run for minutes (resumes and the messages beside the call use j.hdr);
// Call reads the answer. A 2026-era call is sent by Call.
func (u *taskUpstream) Send(ctx context.Context, ej *engine.Job) {
	j := jobOf(ej)
	if j.modern != nil {
		return
	}
	j.req.Header.ResetConnectionClose()
	x, err := u.h.up.Send(ctx, j.req)
	if err != nil {
		j.sendErr = err
		return
	}
	fasthttp.ReleaseRequest(j.req)
	j.req, j.sent = nil, x
}

// Wait waits for the answer to what Send wrote.
func (u *taskUpstream) Wait(ej *engine.Job) {
	if x := jobOf(ej).sent; x != nil {
		_ = x.Wait() // a failure is Await's to report
	}
}

// Call runs the call and classifies the upstream's answer.
func (u *taskUpstream) Call(ctx context.Context, ej *engine.Job) engine.Result {
	j := jobOf(ej)
	switch {
	case j.modern != nil:
		return u.h.callModern(ctx, j)
	case j.sendErr != nil:
		return transportFailure(ctx, j.sendErr)
	case j.sent != nil:
		x := j.sent
		j.sent = nil
		return u.h.readCall(ctx, j, x)
	}
	return u.h.callUpstreamOnce(ctx, j)
}

// Stopped tells the upstream to stop the call.
func (u *taskUpstream) Stopped(ej *engine.Job, reason string) {
	j := jobOf(ej)
	j.traceEvent(tracing.EventStopped, attribute.String("reason", reason))
	u.h.notifyCancelled(j, reason)
}

// Answers posts the client's answers upstream.
func (u *taskUpstream) Answers(ctx context.Context, ej *engine.Job) {
	u.h.deliverAnswers(ctx, jobOf(ej))
}

// CloseSession ends the call's upstream session with a DELETE.
func (u *taskUpstream) CloseSession(ej *engine.Job) { u.h.closeUpstreamSession(jobOf(ej)) }

// Ended releases the call's request (a 2025-era call's was released once
// sent).
func (u *taskUpstream) Ended(ej *engine.Job) {
	j := jobOf(ej)
	j.endCall()
	if j.sent != nil { // sent, never read (Call panicked)
		j.sent.Done()
		j.sent = nil
	}
	if j.req != nil {
		fasthttp.ReleaseRequest(j.req)
		j.req = nil
	}
}
