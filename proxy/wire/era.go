package wire

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
)

// Era serves the requests of one protocol revision's wire. The front asks
// the registered eras in order; the first whose Serve reports true has
// answered the request, and a request no era serves passes through.
type Era interface {
	// Serve serves r if it belongs to this era and reports whether it
	// did. r is a POST's parsed message (r.Env, possibly a batch), or a
	// GET or DELETE of the MCP endpoint (r.Env zero). It runs on the
	// request's goroutine and must not keep r past its return.
	Serve(r *Request) bool
	// Close stops the era's background work and waits for it.
	Close()
}

// Call is one era's side of a background task call: how the call runs
// and how, while it runs, the upstream's notifications and requests reach
// the client, the client's answers reach the upstream, and its end is
// told. The engine-facing Runner calls it from the call's runner and
// supervisor goroutines; an era may keep per-call state behind it.
type Call interface {
	// Run performs j's upstream call until its answer or ctx's end, and
	// classifies the answer (the zero Result when ctx ended).
	Run(ctx context.Context, j *Job) engine.Result
	// Notification delivers a notification the upstream sent about the
	// call (env is msg's envelope; msg is a copy the call may keep).
	Notification(ctx context.Context, j *Job, env *Envelope, msg []byte)
	// Request delivers a request the upstream sent during the call (a
	// question for the client: elicitation, sampling, roots).
	Request(ctx context.Context, j *Job, env *Envelope, msg []byte)
	// Answers hands the client's answers waiting in the task's inbox to
	// the upstream.
	Answers(ctx context.Context, j *Job)
	// Stopped tells the upstream that the call was stopped for reason.
	Stopped(j *Job, reason string)
	// End releases the era's per-call state; the call's run is over.
	End(j *Job)
}

// Sender is a Call whose request can be written before Run (see
// engine.Sender): the runner's wait for the answer then happens near the
// bottom of its stack.
type Sender interface {
	Send(ctx context.Context, j *Job)
}

// Runner runs the engine's task calls (engine.Upstream, engine.Sender):
// what varies by era it leaves to the job's Call.
type Runner struct{ F *Front }

var (
	_ engine.Upstream = (*Runner)(nil)
	_ engine.Sender   = (*Runner)(nil)
)

// Begin copies the request's headers for the messages sent beside the
// call (supervisor and runner may send them while the call is written).
func (u *Runner) Begin(ej *engine.Job) {
	j := JobOf(ej)
	j.Hdr = j.Req.Header.AppendBytes(nil)
}

// Send writes the call's request early when its era allows it.
func (u *Runner) Send(ctx context.Context, ej *engine.Job) {
	j := JobOf(ej)
	if s, ok := j.Call.(Sender); ok {
		s.Send(ctx, j)
	}
}

// Wait waits for the answer to what Send wrote.
func (u *Runner) Wait(ej *engine.Job) {
	if x := JobOf(ej).Sent; x != nil {
		_ = x.Wait() // a failure is Await's to report
	}
}

// Call runs the call and classifies the upstream's answer.
func (u *Runner) Call(ctx context.Context, ej *engine.Job) engine.Result {
	j := JobOf(ej)
	switch {
	case j.SendErr != nil:
		return TransportFailure(ctx, j.SendErr)
	case j.Sent != nil:
		x := j.Sent
		j.Sent = nil
		return u.F.ReadCall(ctx, j, x)
	}
	return j.Call.Run(ctx, j)
}

// Stopped tells the upstream to stop the call.
func (u *Runner) Stopped(ej *engine.Job, reason string) {
	j := JobOf(ej)
	j.TraceEvent(tracing.EventStopped, attribute.String("reason", reason))
	j.Call.Stopped(j, reason)
}

// Answers posts the client's answers upstream.
func (u *Runner) Answers(ctx context.Context, ej *engine.Job) {
	j := JobOf(ej)
	j.Call.Answers(ctx, j)
}

// CloseSession ends the call's upstream session with a DELETE.
func (u *Runner) CloseSession(ej *engine.Job) { u.F.CloseUpstreamSession(JobOf(ej)) }

// Ended releases the call's request (a call sent early released it once
// sent).
func (u *Runner) Ended(ej *engine.Job) {
	j := JobOf(ej)
	j.EndCall()
	j.Call.End(j)
	if j.Sent != nil { // sent, never read (Run panicked)
		j.Sent.Done()
		j.Sent = nil
	}
	if j.Req != nil {
		fasthttp.ReleaseRequest(j.Req)
		j.Req = nil
	}
}

// SendEarly writes j's request and releases it, as the call may run for
// minutes (resumes and the messages beside the call use j.Hdr); Run, or
// the Runner, reads the answer. It is what a Sender's Send does.
func (f *Front) SendEarly(ctx context.Context, j *Job) {
	j.Req.Header.ResetConnectionClose()
	x, err := f.Up.Send(ctx, j.Req)
	if err != nil {
		j.SendErr = err
		return
	}
	fasthttp.ReleaseRequest(j.Req)
	j.Req, j.Sent = nil, x
}
