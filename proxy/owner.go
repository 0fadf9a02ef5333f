package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/proxy/wire"
)

// ownerAnonymous owns the tasks of requests that carry neither an
// Authorization header nor a session id. Such tasks are protected only by
// their unguessable ids, and tasks/list is not offered to them (T-76).
const ownerAnonymous = "anon"

// owner derives the task owner of a request (T-74): a keyed hash of the
// Authorization header when there is one, else of the session id. The raw
// token is never stored or logged. identified is false for anonymous callers.
func (h *Handler) owner(hdr *fasthttp.RequestHeader) (owner string, identified bool) {
	if a := hdr.Peek(fasthttp.HeaderAuthorization); len(a) > 0 {
		return "a" + h.keyedHash("authorization", a), true
	}
	if s := hdr.Peek(wire.HeaderSessionID); len(s) > 0 {
		return "s" + h.keyedHash("session", s), true
	}
	return ownerAnonymous, false
}

// ownerKey is the key of keyedHash with its pool of keyed HMAC states
// (*macState): hmac.New hashes the key into two fresh SHA-256 states on
// every call, Reset only restores them.
type ownerKey struct {
	key  []byte
	macs sync.Pool
}

// SetOwnerKey replaces the key that turns credentials and session ids into
// task owners and store keys (Config.OwnerKey), for hashes computed from
// now on. A caller that learns the key replicas share only after New (from
// the store) sets it before it lets task operations reach the store. An
// empty key is ignored. It is safe for concurrent use.
func (h *Handler) SetOwnerKey(key []byte) {
	if len(key) == 0 {
		return
	}
	if h.okey.Swap(&ownerKey{key: append([]byte(nil), key...)}) != nil {
		// Cached session bindings hold credential hashes under the old
		// key; they are read again from the store.
		h.bindings.clear()
	}
}

// clear forgets every cached binding.
func (c *bindingCache) clear() {
	c.mu.Lock()
	c.cur, c.old = nil, nil
	c.mu.Unlock()
}

// keyedHash is HMAC-SHA256(owner key, domain NUL v), the first 16 bytes in
// hex.
func (h *Handler) keyedHash(domain string, v []byte) string {
	out := h.keyedHashHex(domain, v)
	return string(out[:])
}

// keyedHashHex is keyedHash without the string. It does not allocate: the
// pooled state carries the buffers that would escape through hash.Hash.
func (h *Handler) keyedHashHex(domain string, v []byte) [32]byte {
	k := h.okey.Load()
	st, _ := k.macs.Get().(*macState)
	if st == nil {
		st = &macState{mac: hmac.New(sha256.New, k.key)}
	}
	st.mac.Reset()
	st.buf = append(append(st.buf[:0], domain...), 0)
	st.mac.Write(st.buf)
	st.mac.Write(v)
	sum := st.mac.Sum(st.sum[:0])
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	k.macs.Put(st)
	return out
}

// macState is a pooled keyed HMAC with its scratch buffers.
type macState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// hashShort is what logs show instead of a session id.
func (h *Handler) hashShort(v []byte) string {
	return h.keyedHash("log", v)[:12]
}

// bridgeRequest rewrites MCP-Protocol-Version on a request of a session
// whose upstream negotiated an older version than the client: the client
// speaks 2025-11-25 to taskgate, the upstream hears its own
// version. Only requests that carry 2025-11-25 are looked at, and the
// session's version comes from memory, so plain pass-through of other
// sessions never touches the store.
func (h *Handler) bridgeRequest(rc *fasthttp.RequestCtx, hdr *fasthttp.RequestHeader) {
	if !h.policy().BridgeProtocolVersion || h.f.Native.Load() {
		// An upstream with tasks of its own is never bridged (P-01).
		return
	}
	if string(hdr.Peek(wire.HeaderProtocolVersion)) != capability.ProtocolVersion {
		return
	}
	up := h.upstreamVersion(hdr.Peek(wire.HeaderSessionID))
	if up != "" && up != capability.ProtocolVersion {
		hdr.Set(wire.HeaderProtocolVersion, up)
	}
}

// upstreamVersion returns the protocol version the upstream negotiated for
// the session ("" when it is not bridged or unknown). A miss in memory asks
// the store once; the answer (also "none") is cached, since a session's
// version never changes once known.
func (h *Handler) upstreamVersion(sid []byte) string {
	if v, ok := h.versions.get(sid); ok {
		return v
	}
	if time.Now().UnixNano() < h.storeDownUntil.Load() {
		return "" // the store just failed: do not make every request wait on it
	}
	// A short bound: this lookup sits on the pass-through path.
	ctx, cancel := context.WithTimeout(h.root, min(h.cfg.StoreTimeout, versionLookupTimeout))
	defer cancel()
	v, err := h.store.SessionVersion(ctx, string(sid))
	if err != nil {
		h.storeDownUntil.Store(time.Now().Add(storeRetryAfter).UnixNano())
		h.log.Warn().Err(err).Msg("reading the session's upstream protocol version failed; not bridging for now")
		return ""
	}
	h.versions.put(string(sid), v)
	return v
}

// storeRetryAfter is how long version lookups are skipped after a failure;
// versionLookupTimeout bounds one lookup.
const (
	storeRetryAfter      = 2 * time.Second
	versionLookupTimeout = 500 * time.Millisecond
)

// rememberVersion records a bridged session's upstream version in memory
// and in the store (for the other replicas).
func (h *Handler) rememberVersion(ctx context.Context, sid, version string) error {
	h.versions.put(sid, version)
	return h.store.SetSessionVersion(ctx, sid, version, sessionVersionTTL)
}

// versionCache is a bounded map of session id -> upstream version with two
// generations: when the current one is full it becomes the old one, so hot
// sessions survive and memory stays bounded. Safe for concurrent use.
type versionCache struct {
	mu       sync.RWMutex
	cur, old map[string]string
	max      int
}

func (c *versionCache) init(max int) {
	c.max = max
	c.cur = make(map[string]string)
}

func (c *versionCache) get(k []byte) (string, bool) {
	c.mu.RLock()
	v, ok := c.cur[string(k)]
	if !ok {
		v, ok = c.old[string(k)]
	}
	c.mu.RUnlock()
	return v, ok
}

func (c *versionCache) put(k, v string) {
	c.mu.Lock()
	if len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[string]string, c.max)
	}
	c.cur[k] = v
	c.mu.Unlock()
}

// sessionVersionTTL is how long a bridged session's upstream version is
// remembered in the store (sessions idle longer than this lose bridging).
const sessionVersionTTL = 7 * 24 * time.Hour
