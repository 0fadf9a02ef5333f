package proxy

import (
	"bufio"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/proxy/wire"
)

// rewriteFunc rewrites the JSON-RPC response message of an intercepted
// request. It runs once, on the first response message of the answer, and
// may not touch the RequestCtx.
type rewriteFunc = func(msg []byte) []byte

// forwardRewriting forwards rc.Request and relays the upstream's answer with
// its response message rewritten by fn, in the framing the upstream used
// (JSON or SSE). Anything but a 2xx JSON or SSE answer is relayed untouched.
func (h *Handler) forwardRewriting(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, fn func(resp *fasthttp.Response) rewriteFunc) {
	h.prepareUpstream(rc, &rc.Request)
	resp := fasthttp.AcquireResponse()
	start := time.Now()
	err := h.up.Do(&rc.Request, resp)
	h.m.observeUpstream(info.Method, time.Since(start))
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		h.upstreamFailed(rc, info, id, err)
		return
	}
	ct := resp.Header.ContentType()
	isSSE := wire.IsEventStream(ct)
	if resp.StatusCode() != fasthttp.StatusOK || (!isSSE && !wire.IsJSON(ct)) {
		// Hand the untouched answer (and its stream) to the client.
		handOver(rc, resp)
		h.relayResponse(rc)
		return
	}
	rw := fn(resp)
	resp.Header.CopyTo(&rc.Response.Header)
	upstream.StripResponseHopByHop(&rc.Response.Header)
	rc.Response.Header.ResetConnectionClose()
	body := resp.BodyStream()
	if !isSSE {
		msg, err := wire.ReadAllLimit(body, h.cfg.MaxResultSize)
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		if err != nil {
			h.upstreamFailed(rc, info, id, err)
			return
		}
		rc.SetBody(rw(msg))
		return
	}
	rc.Response.ImmediateHeaderFlush = true
	max, lifetime := h.cfg.MaxResultSize, h.cfg.StreamMaxLifetime
	// fasthttp runs this writer after forwardRewriting has returned, and
	// from then on rc, its Request, Response and headers are fasthttp's
	// (it writes the headers, then reuses the buffers). The writer touches
	// only what it owns: resp and body (the upstream answer, released when
	// it returns), rw (whose captures are copies), max and lifetime; w is
	// valid until the writer returns.
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer fasthttp.ReleaseResponse(resp)
		defer resp.CloseBodyStream() //nolint:errcheck // nothing to do about it
		deadline := time.Now().Add(lifetime)
		r := sse.NewReader(body, max)
		done := false
		buf := make([]byte, 0, 1024)
		for time.Now().Before(deadline) {
			ev, err := r.Next()
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				return
			}
			if !done && len(ev.Data) > 0 {
				if env, perr := wire.ParseEnvelope(ev.Data); perr == nil && env.IsResponse() {
					done = true
					buf = sse.AppendRewritten(buf[:0], ev, rw(ev.Data))
					if _, werr := w.Write(buf); werr != nil {
						return
					}
					if w.Flush() != nil || err != nil {
						return
					}
					continue
				}
			}
			if _, werr := w.Write(ev.Raw); werr != nil || w.Flush() != nil || err != nil {
				return
			}
		}
	})
}
