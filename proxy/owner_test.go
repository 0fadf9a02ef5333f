package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// T-74: the owner is HMAC-SHA256(OwnerKey, domain NUL value) (first 16
// bytes, hex), the same through the pooled HMAC states from any goroutine.
func TestKeyedHashIsHMAC(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	h, err := New(Config{Upstream: "http://127.0.0.1:1/mcp", OwnerKey: key}, nil, newTestStore(t), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	want := func(domain, v string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(domain + "\x00" + v))
		return hex.EncodeToString(m.Sum(nil)[:16])
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				domain := []string{"authorization", "session", "log"}[i%3]
				v := fmt.Sprintf("Bearer token-%d-%d", g, i)
				if got := h.id.keyedHash(domain, []byte(v)); got != want(domain, v) {
					errs <- fmt.Sprintf("keyedHash(%q, %q) = %s, want %s", domain, v, got, want(domain, v))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if a, b := h.id.keyedHash("authorization", []byte("x")), h.id.keyedHash("session", []byte("x")); a == b {
		t.Error("the domains do not separate the hashes")
	}
}
