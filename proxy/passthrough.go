package proxy

import (
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/proxy/wire"
)

// prepareUpstream makes rc.Request ready to forward: hop-by-hop headers
// removed, Host per config, scheme matching the upstream, protocol version
// bridged.
func (h *Handler) prepareUpstream(rc *fasthttp.RequestCtx, req *fasthttp.Request) {
	h.up.Prepare(req)
	h.bridge.bridgeRequest(rc, &req.Header)
}

// pass forwards the request unchanged and streams the answer back. id is
// the JSON-RPC id for error answers (nil if unknown or none).
func (h *Handler) pass(rc *fasthttp.RequestCtx, info *wire.Info, id []byte) {
	h.prepareUpstream(rc, &rc.Request)
	start := time.Now()
	stream, err := h.up.Relay(rc)
	if stream != nil {
		// The answer streams on after the handler returns: the request
		// is logged and counted when it ends.
		stream.SetEnd(h.beginStream(info))
	}
	h.m.observeUpstream(info.Method, time.Since(start))
	if err != nil {
		h.upstreamFailed(rc, info, id, err)
		return
	}
	h.relayResponse(rc)
}

// relayResponse fixes up an upstream answer now in rc.Response for the
// client: hop-by-hop headers removed. Every SSE event is flushed as it
// arrives (fasthttp flushes each chunk). The headers of a GET stream, which
// may stay silent for long, go out at once (fasthttp's ImmediateHeaderFlush, set after Do, which resets
// the response); those of a
// POST's SSE answer travel with its first event, one write instead of two
// (the upstream's first event comes soon: a priming event, H-07, or the
// response).
func (h *Handler) relayResponse(rc *fasthttp.RequestCtx) {
	resp := &rc.Response
	upstream.StripResponseHopByHop(&resp.Header)
	resp.Header.ResetConnectionClose()
	if rc.IsGet() && wire.IsEventStream(resp.Header.ContentType()) {
		resp.ImmediateHeaderFlush = true
	}
}

// handOver moves an upstream answer held in a separate Response into
// rc.Response, streaming its body; resp is released when the body is done.
func handOver(rc *fasthttp.RequestCtx, resp *fasthttp.Response) {
	resp.Header.CopyTo(&rc.Response.Header)
	if s := resp.BodyStream(); s != nil {
		rc.Response.SetBodyStream(&ownedStream{resp: resp, r: s}, resp.Header.ContentLength())
		return
	}
	rc.Response.SetBody(resp.Body())
	fasthttp.ReleaseResponse(resp)
}

// ownedStream is a body stream that releases its Response when closed.
type ownedStream struct {
	resp *fasthttp.Response
	r    io.Reader
}

func (o *ownedStream) Read(p []byte) (int, error) { return o.r.Read(p) }

func (o *ownedStream) Close() error {
	err := o.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(o.resp)
	return err
}

// upstreamFailed answers 502 (or 504 on a timeout) with a JSON-RPC error
// that echoes the request id, and logs what failed.
func (h *Handler) upstreamFailed(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, err error) {
	status, msg := upstream.StatusFor(err)
	info.Outcome = "upstream_unreachable"
	h.f.LogOf(info).Warn().Uint64(wire.LogReqID, rc.ID()).Str(wire.LogRPCMethod, info.Method).Err(err).Msg("upstream request failed")
	wire.HTTPError(rc, status, id, wire.CodeInternalError, msg)
}
