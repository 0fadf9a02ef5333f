package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/taskstore"
)

// CallUpstreamOnce sends the call's request once and classifies the answer.
func (f *Front) CallUpstreamOnce(ctx context.Context, j *Job) engine.Result {
	j.Req.Header.ResetConnectionClose()
	x, err := f.Up.Send(ctx, j.Req)
	if err != nil {
		return TransportFailure(ctx, err)
	}
	return f.ReadCall(ctx, j, x)
}

// ReadCall reads and classifies the answer to the request x wrote, and
// releases x.
func (f *Front) ReadCall(ctx context.Context, j *Job, x *upstream.Call) engine.Result {
	defer x.Done()
	if err := x.Await(); err != nil {
		return TransportFailure(ctx, err)
	}
	return f.readAnswer(ctx, j, x)
}

// TransportFailure is the result of a call whose exchange failed with err (the
// zero Result when ctx ended: its cause decides).
func TransportFailure(ctx context.Context, err error) engine.Result {
	if ctx.Err() != nil {
		return engine.Result{} // the cause decides
	}
	return engine.Result{Status: taskstore.Failed, Message: upstream.FailureMessage(err),
		Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

// InternalFailure is a failed result with an internal outcome.
func InternalFailure(format string, args ...any) engine.Result {
	return engine.Result{Status: taskstore.Failed, Message: fmt.Sprintf(format, args...),
		Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

// readAnswer reads a JSON or SSE answer to the task's request.
func (f *Front) readAnswer(ctx context.Context, j *Job, x *upstream.Call) engine.Result {
	resp := x.Resp
	switch code := resp.StatusCode(); {
	case code == fasthttp.StatusNotFound:
		return InternalFailure("upstream answered HTTP 404: its MCP session ended; re-initialize and call again")
	case code < 200 || code > 299:
		return InternalFailure("upstream answered HTTP %d", code)
	}
	ct := resp.Header.ContentType()
	body := resp.BodyStream()
	if body == nil {
		body = bytes.NewReader(resp.Body())
	}
	if IsEventStream(ct) {
		return f.readSSEAnswer(ctx, j, x, body)
	}
	msg, err := ReadAllLimit(body, f.Config.MaxResultSize)
	x.SetReusable(err == nil)
	if errors.Is(err, ErrTooLarge) {
		return InternalFailure("upstream result exceeds the result size limit of %d bytes", f.Config.MaxResultSize)
	}
	if err != nil {
		return TransportFailure(ctx, err)
	}
	if len(msg) == 0 {
		return InternalFailure("upstream answered HTTP %d without a JSON-RPC response", resp.StatusCode())
	}
	return Classify(msg)
}

// readSSEAnswer reads events until the response to the task's request,
// answering upstream pings and resuming with GET + Last-Event-ID when the
// upstream drops the connection after an event with an id (P-04, E-23).
func (f *Front) readSSEAnswer(ctx context.Context, j *Job, cur *upstream.Call, body io.Reader) engine.Result {
	var lastID string
	retry := time.Second
	for resumes := 0; ; resumes++ {
		r := sse.NewReaderSize(body, upstream.BackgroundReadBuf, f.Config.MaxResultSize) // the background variant: a line buffer of the call's read buffer size
		// Only the fields are read: no copy of each event into Raw (of a
		// result of megabytes).
		r.SkipRaw()
		for {
			ev, err := r.Next()
			if ev != nil && err == nil {
				if ev.HasID {
					lastID = string(ev.ID)
				}
				if ev.Retry >= 0 {
					retry = time.Duration(ev.Retry) * time.Millisecond
				}
				if len(ev.Data) > 0 {
					// ev.Data is r's until its next event; the answer
					// is the last one read, and r is dropped with it, so
					// the answer keeps ev.Data uncopied (final).
					if res, final := f.onUpstreamMessage(ctx, j, ev.Data); final {
						cur.DrainEnd(body)
						return res
					}
				}
				continue
			}
			if errors.Is(err, sse.ErrEventTooLarge) {
				return InternalFailure("upstream result exceeds the result size limit of %d bytes", f.Config.MaxResultSize)
			}
			if ctx.Err() != nil {
				return engine.Result{}
			}
			break // stream ended without the response
		}
		if lastID == "" || resumes >= maxResumes {
			return InternalFailure("upstream closed the stream before answering the call")
		}
		select {
		case <-time.After(min(retry, 30*time.Second)):
		case <-ctx.Done():
			return engine.Result{}
		}
		next, err := f.resume(ctx, j, lastID)
		if err != nil {
			if ctx.Err() != nil {
				return engine.Result{}
			}
			return InternalFailure("resuming the upstream stream failed: %v", err)
		}
		defer next.Done()
		cur, body = next, next.Resp.BodyStream()
	}
}

// maxResumes bounds reconnects of one call's upstream stream.
const maxResumes = 10

// resume reopens the call's stream: GET with Last-Event-ID (H-12).
func (f *Front) resume(ctx context.Context, j *Job, lastID string) (*upstream.Call, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if j.Req != nil {
		j.Req.Header.CopyTo(&req.Header)
	} else {
		if err := j.Header(&req.Header); err != nil { // the call's headers, copied before it was sent
			return nil, err
		}
		req.Header.ResetConnectionClose()
	}
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Del(fasthttp.HeaderContentType)
	req.Header.Del(fasthttp.HeaderContentLength) // the POST's length would make the upstream wait for a body
	req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
	req.Header.Set(HeaderLastEventID, lastID)
	x, err := f.Up.RoundTrip(ctx, req)
	if err != nil {
		return nil, err
	}
	if x.Resp.StatusCode() != fasthttp.StatusOK || !IsEventStream(x.Resp.Header.ContentType()) {
		code := x.Resp.StatusCode()
		x.Done()
		return nil, fmt.Errorf("upstream answered the resume with HTTP %d", code)
	}
	return x, nil
}

// onUpstreamMessage handles one message of the call's stream; final is
// true when msg is the call's response, whose Result then keeps msg (not
// a copy: a result can be megabytes): the caller reads nothing more into
// msg's memory. Other messages are copied.
func (f *Front) onUpstreamMessage(ctx context.Context, j *Job, msg []byte) (engine.Result, bool) {
	env, err := ParseEnvelope(msg)
	if err != nil || env.Kind == jsonx.KindBatch {
		j.Log.Warn().Err(err).Msg("ignoring a malformed message on the upstream stream")
		return engine.Result{}, false
	}
	switch {
	case env.IsResponse():
		return Classify(msg), true
	case env.Method == MethodPing && env.IsRequest():
		// Answered here: a ping is no reason for input_required (E-36).
		f.PostUpstream(j, AppendResult(nil, env.ID, []byte("{}")))
	case env.IsRequest():
		j.Call.Request(ctx, j, &env, append([]byte(nil), msg...))
	case env.Kind == jsonx.KindNotification:
		j.Call.Notification(ctx, j, &env, append([]byte(nil), msg...))
	}
	return engine.Result{}, false
}

// Classify maps the upstream's final message to a status on the
// 2025-11-25 wire: a JSON-RPC error or a result with isError:true is
// failed (T-24, Q-03), anything else completed. The outcome itself is kept
// raw, so the other wire can render it its own way.
func Classify(msg []byte) engine.Result {
	vals, err := jsonx.Members(msg, "result", "error")
	if err != nil {
		return InternalFailure("upstream answered with a malformed JSON-RPC message")
	}
	if e := vals[1]; e != nil {
		code, text := "", ""
		if ev, err := jsonx.Members(e, "code", "message"); err == nil {
			code = string(ev[0])
			text, _ = jsonx.UnquoteValue(ev[1])
		}
		return engine.Result{Status: taskstore.Failed, Message: Truncate("upstream returned JSON-RPC error "+code+": "+text, 300),
			Outcome: taskstore.Outcome{Kind: taskstore.OutcomeError, Raw: e}}
	}
	res := vals[0]
	if res == nil || res[0] != '{' {
		return InternalFailure("upstream answered without a result object")
	}
	out := taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: res}
	rv, err := jsonx.Members(res, "isError", "content")
	if err == nil && string(rv[0]) == "true" {
		return engine.Result{Status: taskstore.Failed, Message: Truncate("tool reported an error: "+firstText(rv[1]), 300), Outcome: out}
	}
	return engine.Result{Status: taskstore.Completed, Outcome: out}
}

// firstText returns the text of the first text content item.
func firstText(content []byte) string {
	if len(content) == 0 || content[0] != '[' {
		return ""
	}
	s := jsonx.Scanner{B: content, I: 1}
	s.Space()
	if s.I >= len(content) || content[s.I] != '{' {
		return ""
	}
	item, err := s.Value()
	if err != nil {
		return ""
	}
	vals, err := jsonx.Members(item, "type", "text")
	if err != nil || string(vals[0]) != `"text"` {
		return ""
	}
	text, _ := jsonx.UnquoteValue(vals[1])
	return text
}

// Truncate cuts s to at most n bytes at a rune boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// PostUpstream sends a message (a notification or a response) upstream
// with the call's session headers and discards the answer.
func (f *Front) PostUpstream(j *Job, body []byte) {
	var hdr fasthttp.RequestHeader
	status, err := 0, j.Header(&hdr)
	if err == nil {
		status, err = f.Up.Post(&hdr, body, 10*time.Second)
	}
	if err != nil || status >= 300 {
		j.Log.Warn().Err(err).Int(LogStatus, status).Msg("message to the upstream not accepted")
	}
}

// NotifyCancelled tells the upstream to stop the call (P-06, E-26) with
// notifications/cancelled naming its request.
func (f *Front) NotifyCancelled(j *Job, reason string) {
	body := make([]byte, 0, 160)
	body = append(body, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	body = append(body, j.Task.UpstreamID...)
	body = append(body, `,"reason":`...)
	body = AppendJSONString(body, reason)
	body = append(body, "}}"...)
	f.PostUpstream(j, body)
}

// IsEventStream reports whether Content-Type ct is text/event-stream.
func IsEventStream(ct []byte) bool {
	return bytes.HasPrefix(bytes.TrimSpace(ct), []byte("text/event-stream"))
}

// IsJSON reports whether Content-Type ct is application/json.
func IsJSON(ct []byte) bool {
	return len(ct) >= 16 && string(ct[:16]) == "application/json"
}

// ErrTooLarge: an upstream answer exceeds the size limit.
var ErrTooLarge = errors.New("upstream answer exceeds the size limit")

// ReadAllLimit reads r to its end, at most max bytes (ErrTooLarge beyond).
func ReadAllLimit(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, ErrTooLarge
	}
	return b, nil
}
