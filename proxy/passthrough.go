package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// hopByHop are the RFC 9110 §7.6.1 connection-specific headers, never
// forwarded in either direction (plus any named in Connection).
var hopByHop = [...]string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// stripRequestHopByHop and stripResponseHopByHop delete the hop-by-hop
// headers and those the Connection header names. One pass over the headers
// finds which are there (most messages carry none, or only Connection:
// keep-alive); a Del per name would copy, normalize and scan for each of
// the nine names on every request. Two functions, not one over an
// interface: ranging over All through an interface allocates.
func stripRequestHopByHop(h *fasthttp.RequestHeader) {
	var s hopScan
	for k, v := range h.All() {
		s.see(k, v)
	}
	s.strip(h)
}

func stripResponseHopByHop(h *fasthttp.ResponseHeader) {
	var s hopScan
	for k, v := range h.All() {
		s.see(k, v)
	}
	s.strip(h)
}

// hopScan collects the hop-by-hop headers of one message.
type hopScan struct {
	found   [len(hopByHop)]bool
	listed  []string // other headers named by Connection
	present bool
}

func (s *hopScan) see(k, v []byte) {
	i := hopIndex(k)
	if i < 0 {
		return
	}
	s.found[i], s.present = true, true
	if i != 0 { // not Connection
		return
	}
	for name := range bytes.SplitSeq(v, []byte(",")) {
		// "close" is a connection option, not a header name; hop-by-hop
		// names are deleted through found when they are present.
		if name = bytes.TrimSpace(name); len(name) > 0 && hopIndex(name) < 0 && !equalFoldASCII(name, "close") {
			s.listed = append(s.listed, string(name))
		}
	}
}

func (s *hopScan) strip(h interface{ Del(key string) }) {
	if !s.present {
		return
	}
	for _, name := range s.listed {
		h.Del(name)
	}
	for i, f := range s.found {
		if f {
			h.Del(hopByHop[i])
		}
	}
}

// hopIndex returns the index of name in hopByHop (any case), or -1.
func hopIndex(name []byte) int {
	for i, hop := range hopByHop {
		if equalFoldASCII(name, hop) {
			return i
		}
	}
	return -1
}

// equalFoldASCII reports whether b and s are equal ignoring ASCII case.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lowerASCII(b[i]) != lowerASCII(s[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// prepareUpstream makes rc.Request ready to forward: hop-by-hop headers
// removed, Host per config, scheme matching the upstream, protocol version
// bridged.
func (h *Handler) prepareUpstream(rc *fasthttp.RequestCtx, req *fasthttp.Request) {
	stripRequestHopByHop(&req.Header)
	req.Header.ResetConnectionClose()
	if h.cfg.RewriteHost {
		// Request.Write takes the host from the parsed URI once it has
		// been parsed (rc.Path does): set both.
		req.URI().SetHost(h.upHost)
		req.Header.SetHost(h.upHost)
	}
	if h.upTLS {
		req.URI().SetScheme("https")
	}
	h.bridgeRequest(rc, &req.Header)
}

// pass forwards the request unchanged and streams the answer back. id is
// the JSON-RPC id for error answers (nil if unknown or none).
func (h *Handler) pass(rc *fasthttp.RequestCtx, info *reqInfo, id []byte) {
	h.prepareUpstream(rc, &rc.Request)
	start := time.Now()
	err := h.relay(rc, info)
	h.m.upstreamLatency.WithLabelValues(metricMethod(info.method)).Observe(time.Since(start).Seconds())
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
	stripResponseHopByHop(&resp.Header)
	resp.Header.ResetConnectionClose()
	if rc.IsGet() && isEventStream(resp.Header.ContentType()) {
		resp.ImmediateHeaderFlush = true
	}
}

func isEventStream(ct []byte) bool {
	return bytes.HasPrefix(bytes.TrimSpace(ct), []byte("text/event-stream"))
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
func (h *Handler) upstreamFailed(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, err error) {
	status, msg := statusFor(err)
	info.outcome = "upstream_unreachable"
	h.log.Warn().Uint64(logReqID, rc.ID()).Str(logRPCMethod, info.method).Err(err).Msg("upstream request failed")
	h.httpRPCError(rc, status, id, codeInternalError, msg)
}

// statusFor maps an upstream transport error to an HTTP status and a
// message for the client.
func statusFor(err error) (int, string) {
	var ne net.Error
	var cve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &cve):
		return fasthttp.StatusBadGateway, "taskgate: upstream TLS certificate not trusted"
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fasthttp.StatusGatewayTimeout, "taskgate: upstream timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return fasthttp.StatusBadGateway, "taskgate: upstream unreachable (connection refused)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, fasthttp.ErrConnectionClosed):
		return fasthttp.StatusBadGateway, "taskgate: upstream closed the connection"
	}
	return fasthttp.StatusBadGateway, "taskgate: upstream request failed"
}
