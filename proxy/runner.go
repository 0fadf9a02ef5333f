package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/taskstore"
)

// callUpstreamOnce sends the call's request once and classifies the answer.
func (h *Handler) callUpstreamOnce(ctx context.Context, j *job) callResult {
	j.req.Header.ResetConnectionClose()
	x, err := h.up.Send(ctx, j.req)
	if err != nil {
		return transportFailure(ctx, err)
	}
	return h.readCall(ctx, j, x)
}

// readCall reads and classifies the answer to the request x wrote, and
// releases x.
func (h *Handler) readCall(ctx context.Context, j *job, x *upstream.Call) callResult {
	defer x.Done()
	if err := x.Await(); err != nil {
		return transportFailure(ctx, err)
	}
	return h.readAnswer(ctx, j, x)
}

func transportFailure(ctx context.Context, err error) callResult {
	if ctx.Err() != nil {
		return callResult{} // the cause decides
	}
	return callResult{Status: taskstore.Failed, Message: upstream.FailureMessage(err),
		Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

func internalFailure(format string, args ...any) callResult {
	return callResult{Status: taskstore.Failed, Message: fmt.Sprintf(format, args...),
		Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

// readAnswer reads a JSON or SSE answer to the task's request.
func (h *Handler) readAnswer(ctx context.Context, j *job, x *upstream.Call) callResult {
	resp := x.Resp
	switch code := resp.StatusCode(); {
	case code == fasthttp.StatusNotFound:
		return internalFailure("upstream answered HTTP 404: its MCP session ended; re-initialize and call again")
	case code < 200 || code > 299:
		return internalFailure("upstream answered HTTP %d", code)
	}
	ct := resp.Header.ContentType()
	body := resp.BodyStream()
	if body == nil {
		body = bytes.NewReader(resp.Body())
	}
	if isEventStream(ct) {
		return h.readSSEAnswer(ctx, j, x, body)
	}
	msg, err := readAllLimit(body, h.cfg.MaxResultSize)
	x.SetReusable(err == nil)
	if errors.Is(err, errTooLarge) {
		return internalFailure("upstream result exceeds the result size limit of %d bytes", h.cfg.MaxResultSize)
	}
	if err != nil {
		return transportFailure(ctx, err)
	}
	if len(msg) == 0 {
		return internalFailure("upstream answered HTTP %d without a JSON-RPC response", resp.StatusCode())
	}
	return classify(msg)
}

// readSSEAnswer reads events until the response to the task's request,
// answering upstream pings and resuming with GET + Last-Event-ID when the
// upstream drops the connection after an event with an id (P-04, E-23).
func (h *Handler) readSSEAnswer(ctx context.Context, j *job, cur *upstream.Call, body io.Reader) callResult {
	var lastID string
	retry := time.Second
	for resumes := 0; ; resumes++ {
		r := sse.NewReaderSize(body, upstream.BackgroundReadBuf, h.cfg.MaxResultSize) // the background variant: a line buffer of the call's read buffer size
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
					if res, final := h.onUpstreamMessage(ctx, j, ev.Data); final {
						cur.DrainEnd(body)
						return res
					}
				}
				continue
			}
			if errors.Is(err, sse.ErrEventTooLarge) {
				return internalFailure("upstream result exceeds the result size limit of %d bytes", h.cfg.MaxResultSize)
			}
			if ctx.Err() != nil {
				return callResult{}
			}
			break // stream ended without the response
		}
		if lastID == "" || resumes >= maxResumes {
			return internalFailure("upstream closed the stream before answering the call")
		}
		select {
		case <-time.After(min(retry, 30*time.Second)):
		case <-ctx.Done():
			return callResult{}
		}
		next, err := h.resume(ctx, j, lastID)
		if err != nil {
			if ctx.Err() != nil {
				return callResult{}
			}
			return internalFailure("resuming the upstream stream failed: %v", err)
		}
		defer next.Done()
		cur, body = next, next.Resp.BodyStream()
	}
}

// maxResumes bounds reconnects of one call's upstream stream.
const maxResumes = 10

// resume reopens the call's stream: GET with Last-Event-ID (H-12).
func (h *Handler) resume(ctx context.Context, j *job, lastID string) (*upstream.Call, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if j.req != nil {
		j.req.Header.CopyTo(&req.Header)
	} else {
		if err := j.header(&req.Header); err != nil { // the call's headers, copied before it was sent
			return nil, err
		}
		req.Header.ResetConnectionClose()
	}
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Del(fasthttp.HeaderContentType)
	req.Header.Del(fasthttp.HeaderContentLength) // the POST's length would make the upstream wait for a body
	req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
	req.Header.Set(headerLastEventID, lastID)
	x, err := h.up.RoundTrip(ctx, req)
	if err != nil {
		return nil, err
	}
	if x.Resp.StatusCode() != fasthttp.StatusOK || !isEventStream(x.Resp.Header.ContentType()) {
		code := x.Resp.StatusCode()
		x.Done()
		return nil, fmt.Errorf("upstream answered the resume with HTTP %d", code)
	}
	return x, nil
}

// onUpstreamMessage handles one message of the call's stream; final is
// true when msg is the call's response.
func (h *Handler) onUpstreamMessage(ctx context.Context, j *job, msg []byte) (callResult, bool) {
	env, err := parseEnvelope(msg)
	if err != nil || env.kind == jsonx.KindBatch {
		j.Log.Warn().Err(err).Msg("ignoring a malformed message on the upstream stream")
		return callResult{}, false
	}
	switch {
	case env.isResponse():
		return classify(append([]byte(nil), msg...)), true
	case env.method == methodPing && env.isRequest():
		// Answered here: a ping is no reason for input_required (E-36).
		h.postUpstream(j, appendResultResponse(nil, env.id, []byte("{}")))
	case env.isRequest():
		h.relayRequest(ctx, j, &env, append([]byte(nil), msg...))
	case env.kind == jsonx.KindNotification:
		h.relayNotification(ctx, j, &env, append([]byte(nil), msg...))
	}
	return callResult{}, false
}

// classify maps the upstream's final message to a status on the
// 2025-11-25 wire: a JSON-RPC error or a result with isError:true is
// failed (T-24, Q-03), anything else completed. The outcome itself is kept
// raw, so the other wire can render it its own way.
func classify(msg []byte) callResult {
	vals, err := jsonx.Members(msg, "result", "error")
	if err != nil {
		return internalFailure("upstream answered with a malformed JSON-RPC message")
	}
	if e := vals[1]; e != nil {
		code, text := "", ""
		if ev, err := jsonx.Members(e, "code", "message"); err == nil {
			code = string(ev[0])
			text, _ = jsonx.UnquoteValue(ev[1])
		}
		return callResult{Status: taskstore.Failed, Message: truncate("upstream returned JSON-RPC error "+code+": "+text, 300),
			Outcome: taskstore.Outcome{Kind: taskstore.OutcomeError, Raw: e}}
	}
	res := vals[0]
	if res == nil || res[0] != '{' {
		return internalFailure("upstream answered without a result object")
	}
	out := taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: res}
	rv, err := jsonx.Members(res, "isError", "content")
	if err == nil && string(rv[0]) == "true" {
		return callResult{Status: taskstore.Failed, Message: truncate("tool reported an error: "+firstText(rv[1]), 300), Outcome: out}
	}
	return callResult{Status: taskstore.Completed, Outcome: out}
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// postUpstream sends a message (a notification or a response) upstream
// with the call's session headers and discards the answer.
func (h *Handler) postUpstream(j *job, body []byte) {
	var hdr fasthttp.RequestHeader
	status, err := 0, j.header(&hdr)
	if err == nil {
		status, err = h.up.Post(&hdr, body, 10*time.Second)
	}
	if err != nil || status >= 300 {
		j.Log.Warn().Err(err).Int(logStatus, status).Msg("message to the upstream not accepted")
	}
}

// notifyCancelled tells the upstream to stop the call (P-06, E-26).
func (h *Handler) notifyCancelled(j *job, reason string) {
	if j.modern != nil && j.modern.era == era2026 {
		return // a 2026 upstream learns it from the closed request stream
	}
	body := make([]byte, 0, 160)
	body = append(body, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	body = append(body, j.Task.UpstreamID...)
	body = append(body, `,"reason":`...)
	body = appendJSONString(body, reason)
	body = append(body, "}}"...)
	h.postUpstream(j, body)
}
