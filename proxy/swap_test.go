package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/policy"
)

// SetPolicy changes the policy later requests see; a nil policy is ignored.
func TestSetPolicy(t *testing.T) {
	tp := struct{ h *Handler }{newBareHandler(t, nil)}
	if got := tp.h.policy().For("build").TaskSupport; got != policy.Optional {
		t.Fatalf("default taskSupport = %q, want optional", got)
	}
	p, err := policy.Parse([]byte("rules:\n  - match: build\n    taskSupport: required\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tp.h.SetPolicy(p)
	if got := tp.h.policy().For("build").TaskSupport; got != policy.Required {
		t.Errorf("after SetPolicy taskSupport = %q, want required", got)
	}
	tp.h.SetPolicy(nil)
	if tp.h.policy() != p {
		t.Error("SetPolicy(nil) replaced the policy")
	}
}

// SetOwnerKey changes the owner a credential maps to; an empty key is
// ignored.
func TestSetOwnerKey(t *testing.T) {
	tp := struct{ h *Handler }{newBareHandler(t, []byte("0123456789abcdef-first"))}
	before := tp.h.id.keyedHash("authorization", []byte("Bearer x"))
	if again := tp.h.id.keyedHash("authorization", []byte("Bearer x")); again != before {
		t.Fatalf("keyedHash not stable: %s, %s", before, again)
	}
	tp.h.SetOwnerKey([]byte("0123456789abcdef-second"))
	after := tp.h.id.keyedHash("authorization", []byte("Bearer x"))
	if after == before {
		t.Error("SetOwnerKey did not change the owner hash")
	}
	tp.h.SetOwnerKey(nil)
	if got := tp.h.id.keyedHash("authorization", []byte("Bearer x")); got != after {
		t.Error("SetOwnerKey(nil) changed the key")
	}
	// A session bound under the old key is not refused under the new one:
	// the cached binding is dropped and read again.
	tp.h.id.bindings.put("sid", binding{cred: "a" + before, checked: time.Now()})
	tp.h.SetOwnerKey([]byte("0123456789abcdef-third"))
	if _, ok := tp.h.id.bindings.get([]byte("sid")); ok {
		t.Error("a binding cached under the old key survived SetOwnerKey")
	}
}

// newBareHandler is a Handler that serves nothing, closed at cleanup.
func newBareHandler(t *testing.T, ownerKey []byte) *Handler {
	h, err := New(Config{Upstream: "http://127.0.0.1:1/mcp", OwnerKey: ownerKey}, nil, newTestStore(t), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	return h
}
