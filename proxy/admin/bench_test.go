package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/taskstore"
)

// fill stores n working tasks over 100 owners and 5 tools.
func fill(tb testing.TB, st taskstore.Store, n int) {
	tb.Helper()
	for i := range n {
		task := &taskstore.Task{Owner: fmt.Sprintf("owner%03d", i%100), Tool: fmt.Sprintf("tool%d", i%5), Runner: "r1", TTL: time.Hour}
		if err := st.Create(context.Background(), task, taskstore.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
}

// The cost of the API's reads with 10,000 live tasks on the embedded
// store, over HTTP on loopback: a page of 100 (the dashboard's), a filtered
// page, and the stats.
func BenchmarkAPI10k(b *testing.B) {
	st, closeStore, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer closeStore()
	fill(b, st, 10000)
	tok := b.TempDir() + "/token"
	if err := os.WriteFile(tok, []byte("bench-token"), 0o600); err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{TokenFile: tok, Store: st, Cancel: func(context.Context, string, string, string) (*taskstore.Task, error) { return nil, nil }}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	srv := hs.URL
	for _, path := range []string{"/admin/v1/tasks?limit=100", "/admin/v1/tasks?limit=100&tool=tool3&status=working", "/admin/v1/stats"} {
		b.Run(path, func(b *testing.B) {
			req, _ := http.NewRequest("GET", srv+path, nil)
			req.Header.Set("Authorization", "Bearer bench-token")
			for b.Loop() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("HTTP %d", resp.StatusCode)
				}
			}
		})
	}
}
