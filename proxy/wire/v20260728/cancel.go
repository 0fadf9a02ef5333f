package v20260728

import (
	"bytes"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/wire"
)

// notifications/cancelled on the 2026 wire. A 2026 client cancels a
// request it is still waiting for by sending notifications/cancelled with
// its request id in a separate POST (the official Go SDK does so, without
// params._meta: a notification declares nothing). The 2026 wire has no
// session to find the request in, so taskgate keeps the plain calls it
// bridges while they run, by caller and request id, and a cancellation
// withdraws the one call it names:
//
//   - the caller is the owner (the keyed hash of Authorization); without
//     credentials, the anonymous owner and the client's IP address, so that
//     a request without credentials cannot cancel the calls of callers on
//     other hosts;
//   - a cancellation whose caller and id match no running call, or more
//     than one (two clients of one credential that both use id 1), is
//     ignored: cancellation is advisory, and a guess must not stop a call
//     its sender cannot tell apart from another's;
//   - it is answered with HTTP 202, like every notification.
//
// A bridged call that is cancelled stops upstream (a 2025 upstream gets
// notifications/cancelled in the call's session; a call held as a task the
// client never sees is withdrawn, its task cancelled). In front of a 2026
// upstream the notification is also passed through, and a client that
// closes its connection while a passed-through call runs closes the
// upstream connection (upstream.Client.Relay), which is how a 2026 server
// sees a request abandoned.

// inflightCalls are the plain 2026 calls a notifications/cancelled can
// reach: the bridged calls that run, by caller and request id.
type inflightCalls struct {
	mu sync.Mutex
	m  map[string][]*inflightCall
}

type inflightCall struct{ cancel func(reason string) }

// add tracks a call under key until the returned untrack is called (more
// than once is fine).
func (c *inflightCalls) add(key string, cancel func(reason string)) (untrack func()) {
	call := &inflightCall{cancel: cancel}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string][]*inflightCall)
	}
	c.m[key] = append(c.m[key], call)
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			calls := c.m[key]
			for i, x := range calls {
				if x == call {
					calls = append(calls[:i], calls[i+1:]...)
					break
				}
			}
			if len(calls) == 0 {
				delete(c.m, key)
			} else {
				c.m[key] = calls
			}
		})
	}
}

// cancel cancels the one call tracked under key and reports whether there
// was exactly one.
func (c *inflightCalls) cancel(key, reason string) bool {
	c.mu.Lock()
	calls := c.m[key]
	var call *inflightCall
	if len(calls) == 1 {
		call = calls[0]
	}
	c.mu.Unlock()
	if call == nil {
		return false
	}
	call.cancel(reason)
	return true
}

// len returns the number of tracked calls.
func (c *inflightCalls) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, calls := range c.m {
		n += len(calls)
	}
	return n
}

// callKey is the key of the request id id (raw JSON) of the caller of rc
// in inflightCalls (ownerOf is the front's Owner).
func callKey(ownerOf func(*fasthttp.RequestHeader) (string, bool), rc *fasthttp.RequestCtx, id []byte) string {
	owner, identified := ownerOf(&rc.Request.Header)
	var b strings.Builder
	b.WriteString(owner)
	b.WriteByte(0)
	if !identified {
		b.WriteString(rc.RemoteIP().String())
	}
	b.WriteByte(0)
	b.Write(bytes.TrimSpace(id))
	return b.String()
}

// trackCall tracks the plain call of rc with the request id id (see
// inflightCalls).
func (w *Wire) trackCall(rc *fasthttp.RequestCtx, id []byte, cancel func(reason string)) (untrack func()) {
	if len(id) == 0 {
		return func() {}
	}
	return w.calls.add(callKey(w.Owner, rc, id), cancel)
}

// cancelled serves a 2026 notifications/cancelled: the call it names is
// withdrawn (see inflightCalls) and the notification is answered with 202;
// in front of a 2026 upstream it is passed through as well.
func (w *Wire) cancelled(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	info.Method = env.Method
	var reqID []byte
	reason := "cancelled by the client"
	if env.Params != nil {
		if vals, err := jsonx.Members(env.Params, "requestId", "reason"); err == nil {
			reqID = vals[0]
			if r, ok := jsonx.UnquoteValue(vals[1]); ok && r != "" {
				reason = r
			}
		}
	}
	matched := len(reqID) > 0 && w.calls.cancel(callKey(w.Owner, rc, reqID), reason)
	if matched {
		w.LogOf(info).Info().Msg("2026 request cancelled by the client")
	}
	if w.Native.Load() {
		w.Pass(rc, info, nil)
		return
	}
	if era, _, err := w.upstreamEra(); err == nil && era == era2026 {
		w.Pass(rc, info, nil)
		return
	}
	if !matched {
		info.Outcome = "ignored"
	}
	rc.SetStatusCode(fasthttp.StatusAccepted)
}
