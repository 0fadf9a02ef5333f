package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// owner derives the task owner of a request (T-74): a keyed hash of the
// Authorization header when there is one, else of the session id. The raw
// token is never stored or logged. identified is false for anonymous callers.
func (i *ident) owner(hdr *fasthttp.RequestHeader) (owner string, identified bool) {
	if a := hdr.Peek(fasthttp.HeaderAuthorization); len(a) > 0 {
		return "a" + i.keyedHash("authorization", a), true
	}
	if s := hdr.Peek(wire.HeaderSessionID); len(s) > 0 {
		return "s" + i.keyedHash("session", s), true
	}
	return wire.OwnerAnonymous, false
}

// ident derives the owners of requests and guards sessions: the keyed
// hashes of credentials and session ids under the owner key, and each
// session's binding to the credential that opened it (sessions.go). It is
// safe for concurrent use.
type ident struct {
	okey     atomic.Pointer[ownerKey] // setKey swaps it; keyedHash reads it
	bindings bindingCache             // session id -> owner binding
	store    taskstore.Store
	log      *zerolog.Logger
	// root bounds the store operations (the engine's root context).
	root         context.Context
	storeTimeout time.Duration
	// storeDownUntil (unix ns) skips session lookups for a moment after
	// one failed, so pass-through does not wait on a dead store (the
	// version bridge shares it).
	storeDownUntil atomic.Int64
}

// sessionKey is the store's name for a client's MCP session.
func (i *ident) sessionKey(sid []byte) string {
	if len(sid) == 0 {
		return ""
	}
	return i.keyedHash("mcp-session", sid)
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
func (h *Handler) SetOwnerKey(key []byte) { h.id.setKey(key) }

// setKey is SetOwnerKey.
func (i *ident) setKey(key []byte) {
	if len(key) == 0 {
		return
	}
	if i.okey.Swap(&ownerKey{key: append([]byte(nil), key...)}) != nil {
		// Cached session bindings hold credential hashes under the old
		// key; they are read again from the store.
		i.bindings.clear()
	}
}

// keyedHash is HMAC-SHA256(owner key, domain NUL v), the first 16 bytes in
// hex.
func (i *ident) keyedHash(domain string, v []byte) string {
	out := i.keyedHashHex(domain, v)
	return string(out[:])
}

// keyedHashHex is keyedHash without the string. It does not allocate: the
// pooled state carries the buffers that would escape through hash.Hash.
func (i *ident) keyedHashHex(domain string, v []byte) [32]byte {
	k := i.okey.Load()
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
func (i *ident) hashShort(v []byte) string {
	return i.keyedHash("log", v)[:12]
}
