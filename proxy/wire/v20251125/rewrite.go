package v20251125

import (
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/wire"
)

// initialize forwards initialize and rewrites the result to advertise tasks
// (capability.RewriteInitialize), bridging the protocol version if needed.
func (w *Wire) initialize(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	requested := ""
	if env.Params != nil {
		if vals, err := jsonx.Members(env.Params, "protocolVersion"); err == nil && vals[0] != nil {
			requested, _ = jsonx.UnquoteValue(vals[0])
		}
	}
	hasAuth := len(rc.Request.Header.Peek(fasthttp.HeaderAuthorization)) > 0
	cred := w.Credential(&rc.Request.Header)
	id := append([]byte(nil), env.ID...)
	log := w.LogOf(info) // not info: the rewrite may run after the handler returned
	w.Forward(rc, info, id, func(resp *fasthttp.Response) func(msg []byte) []byte {
		sid := string(resp.Header.Peek(wire.HeaderSessionID))
		if resp.StatusCode() == fasthttp.StatusOK {
			w.sessionless.Store(sid == "")
		}
		if sid != "" {
			// Before the client learns the id: the session is its own.
			w.BindSession(log, sid, cred)
		}
		pol := w.Policy()
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
				w.ownOnce.Do(func() {
					w.Log.Info().Str("upstream_version", ci.UpstreamVersion).
						Msg("upstream declares tasks itself; the policy's ownTasks has taskgate serve them (the upstream gets plain calls)")
				})
			}
			if ci.UpstreamHasTasks && !opt.OwnTasks {
				w.nativeOnce.Do(func() {
					w.Native.Store(true)
					log.Info().Str("upstream_version", ci.UpstreamVersion).
						Msg("upstream declares tasks itself: taskgate passes all traffic through unchanged")
				})
				return msg
			}
			if ci.Bridged {
				if err := w.RememberVersion(w.Root, sid, ci.UpstreamVersion); err != nil {
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
func (w *Wire) toolsList(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	if !tasksActive(&rc.Request.Header) {
		w.Pass(rc, info, env.ID)
		return
	}
	id := append([]byte(nil), env.ID...)
	log := w.LogOf(info) // not info: the rewrite may run after the handler returned
	w.Forward(rc, info, id, func(*fasthttp.Response) func(msg []byte) []byte {
		return func(msg []byte) []byte {
			out, err := capability.RewriteToolsList(msg, w.taskSupport)
			if err != nil {
				log.Warn().Err(err).Msg("tools/list result not rewritten: malformed upstream answer")
				return msg
			}
			return out
		}
	})
}

func (w *Wire) taskSupport(tool string) string {
	return string(w.Policy().For(tool).TaskSupport)
}
