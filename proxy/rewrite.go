package proxy

import (
	"bufio"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/upstream"
)

// sessionVersionTTL is how long a bridged session's upstream version is
// remembered in the store (sessions idle longer than this lose bridging).
const sessionVersionTTL = 7 * 24 * time.Hour

// rewriteFunc rewrites the JSON-RPC response message of an intercepted
// request. It runs once, on the first response message of the answer, and
// may not touch the RequestCtx.
type rewriteFunc func(msg []byte) []byte

// forwardRewriting forwards rc.Request and relays the upstream's answer with
// its response message rewritten by fn, in the framing the upstream used
// (JSON or SSE). Anything but a 2xx JSON or SSE answer is relayed untouched.
func (h *Handler) forwardRewriting(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, fn func(resp *fasthttp.Response) rewriteFunc) {
	h.prepareUpstream(rc, &rc.Request)
	resp := fasthttp.AcquireResponse()
	start := time.Now()
	err := h.up.Do(&rc.Request, resp)
	h.m.observeUpstream(info.method, time.Since(start))
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		h.upstreamFailed(rc, info, id, err)
		return
	}
	ct := resp.Header.ContentType()
	isSSE := isEventStream(ct)
	if resp.StatusCode() != fasthttp.StatusOK || (!isSSE && !isJSON(ct)) {
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
		msg, err := readAllLimit(body, h.cfg.MaxResultSize)
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
				if env, perr := parseEnvelope(ev.Data); perr == nil && env.isResponse() {
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

func isJSON(ct []byte) bool {
	return len(ct) >= 16 && string(ct[:16]) == "application/json"
}

var errTooLarge = errors.New("upstream answer exceeds the size limit")

func readAllLimit(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// initialize forwards initialize and rewrites the result to advertise tasks
// (capability.RewriteInitialize), bridging the protocol version if needed.
func (h *Handler) initialize(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	requested := ""
	if env.params != nil {
		if vals, err := jsonx.Members(env.params, "protocolVersion"); err == nil && vals[0] != nil {
			requested, _ = jsonx.UnquoteValue(vals[0])
		}
	}
	hasAuth := len(rc.Request.Header.Peek(fasthttp.HeaderAuthorization)) > 0
	cred := h.credential(&rc.Request.Header)
	id := append([]byte(nil), env.id...)
	log := h.logOf(info) // not info: the rewrite may run after the handler returned
	h.forwardRewriting(rc, info, id, func(resp *fasthttp.Response) rewriteFunc {
		sid := string(resp.Header.Peek(headerSessionID))
		if resp.StatusCode() == fasthttp.StatusOK {
			h.sessionless.Store(sid == "")
		}
		if sid != "" {
			// Before the client learns the id: the session is its own.
			h.bindSession(log, sid, cred)
		}
		pol := h.policy()
		opt := capability.InitOptions{
			List:     hasAuth || sid != "",
			Bridge:   pol.BridgeProtocolVersion && requested == capability.ProtocolVersion,
			OwnTasks: pol.OwnTasks,
		}
		return func(msg []byte) []byte {
			out, ci, err := capability.RewriteInitialize(msg, opt)
			if err != nil {
				log.Warn().Err(err).Msg("initialize result not rewritten: malformed upstream answer")
				return msg
			}
			if ci.UpstreamHasTasks && opt.OwnTasks {
				h.ownOnce.Do(func() {
					h.log.Info().Str("upstream_version", ci.UpstreamVersion).
						Msg("upstream declares tasks itself; the policy's ownTasks has taskgate serve them (the upstream gets plain calls)")
				})
			}
			if ci.UpstreamHasTasks && !opt.OwnTasks {
				h.nativeOnce.Do(func() {
					h.native.Store(true)
					log.Info().Str("upstream_version", ci.UpstreamVersion).
						Msg("upstream declares tasks itself: taskgate passes all traffic through unchanged")
				})
				return msg
			}
			if ci.Bridged {
				if err := h.rememberVersion(h.root, sid, ci.UpstreamVersion); err != nil {
					// Without the version, later requests of the session
					// would reach the upstream with a version it rejects.
					log.Error().Err(err).Msg("recording the bridged protocol version failed; answering without tasks")
					return msg
				}
			}
			return out
		}
	})
}

// toolsList forwards tools/list and sets each tool's execution.taskSupport
// from the policy, for sessions that speak the tasks protocol version.
func (h *Handler) toolsList(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	if !h.tasksActive(&rc.Request.Header) {
		h.pass(rc, info, env.id)
		return
	}
	id := append([]byte(nil), env.id...)
	log := h.logOf(info) // not info: the rewrite may run after the handler returned
	h.forwardRewriting(rc, info, id, func(*fasthttp.Response) rewriteFunc {
		return func(msg []byte) []byte {
			out, err := capability.RewriteToolsList(msg, h.taskSupport)
			if err != nil {
				log.Warn().Err(err).Msg("tools/list result not rewritten: malformed upstream answer")
				return msg
			}
			return out
		}
	})
}

func (h *Handler) taskSupport(tool string) string {
	return string(h.policy().For(tool).TaskSupport)
}

// tasksActive reports whether the request belongs to a session that
// negotiated 2025-11-25 with the client (natively or bridged): only such
// sessions have tasks (Q-12, L-05). Others are served as if taskgate were
// not there (T-11).
func (h *Handler) tasksActive(hdr *fasthttp.RequestHeader) bool {
	return string(hdr.Peek(headerProtocolVersion)) == capability.ProtocolVersion
}
