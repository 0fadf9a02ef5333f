package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// Protocol-version bridging: a client speaks 2025-11-25 to taskgate while
// the upstream negotiated an older version for the session (the policy's
// bridgeProtocolVersion); its requests reach the upstream with the
// upstream's version.

// versionBridge remembers the upstream's protocol version of bridged
// sessions and rewrites their requests. It is safe for concurrent use.
type versionBridge struct {
	versions versionCache
	store    taskstore.Store
	log      *zerolog.Logger
	policy   func() *policy.Policy
	native   *atomic.Bool // the upstream has tasks itself: never bridged (P-01)
	// root and storeTimeout bound the store lookups; downUntil is the
	// identity's: a failed lookup of either pauses both.
	root         context.Context
	storeTimeout time.Duration
	downUntil    *atomic.Int64
}

// bridgeRequest rewrites MCP-Protocol-Version on a request of a session
// whose upstream negotiated an older version than the client: the client
// speaks 2025-11-25 to taskgate, the upstream hears its own
// version. Only requests that carry 2025-11-25 are looked at, and the
// session's version comes from memory, so plain pass-through of other
// sessions never touches the store.
func (vb *versionBridge) bridgeRequest(rc *fasthttp.RequestCtx, hdr *fasthttp.RequestHeader) {
	if !vb.policy().BridgeProtocolVersion || vb.native.Load() {
		// An upstream with tasks of its own is never bridged (P-01).
		return
	}
	if string(hdr.Peek(wire.HeaderProtocolVersion)) != capability.ProtocolVersion {
		return
	}
	up := vb.upstreamVersion(hdr.Peek(wire.HeaderSessionID))
	if up != "" && up != capability.ProtocolVersion {
		hdr.Set(wire.HeaderProtocolVersion, up)
	}
}

// upstreamVersion returns the protocol version the upstream negotiated for
// the session ("" when it is not bridged or unknown). A miss in memory asks
// the store once; the answer (also "none") is cached, since a session's
// version never changes once known.
func (vb *versionBridge) upstreamVersion(sid []byte) string {
	if v, ok := vb.versions.get(sid); ok {
		return v
	}
	if time.Now().UnixNano() < vb.downUntil.Load() {
		return "" // the store just failed: do not make every request wait on it
	}
	// A short bound: this lookup sits on the pass-through path.
	ctx, cancel := context.WithTimeout(vb.root, min(vb.storeTimeout, versionLookupTimeout))
	defer cancel()
	v, err := vb.store.SessionVersion(ctx, string(sid))
	if err != nil {
		vb.downUntil.Store(time.Now().Add(storeRetryAfter).UnixNano())
		vb.log.Warn().Err(err).Msg("reading the session's upstream protocol version failed; not bridging for now")
		return ""
	}
	vb.versions.put(string(sid), v)
	return v
}

// storeRetryAfter is how long version lookups are skipped after a failure;
// versionLookupTimeout bounds one lookup.
const (
	storeRetryAfter      = 2 * time.Second
	versionLookupTimeout = 500 * time.Millisecond
)

// remember records a bridged session's upstream version in memory
// and in the store (for the other replicas).
func (vb *versionBridge) remember(ctx context.Context, sid, version string) error {
	vb.versions.put(sid, version)
	return vb.store.SetSessionVersion(ctx, sid, version, sessionVersionTTL)
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
