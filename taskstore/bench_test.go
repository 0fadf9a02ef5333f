package taskstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// benchBackends: miniredis and a spawned redis-server (skipped without it).
func benchBackends(b *testing.B, fn func(b *testing.B, s *Redis)) {
	for name, mk := range map[string]func(testing.TB) *backend{
		"miniredis":    miniBackend,
		"redis-server": func(tb testing.TB) *backend { return redisServer(tb)(tb) },
	} {
		b.Run(name, func(b *testing.B) {
			s := mk(b).open(b, Config{})
			fn(b, s)
		})
	}
}

func benchCreate(b *testing.B, s *Redis, n int) []*Task {
	b.Helper()
	ctx := context.Background()
	out := make([]*Task, n)
	for i := range out {
		out[i] = newTask(ownerA)
		if err := s.Create(ctx, out[i], CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

func BenchmarkCreate(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *Redis) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			task := &Task{Owner: ownerA, TTL: time.Hour, Tool: "build", UpstreamID: "1", Runner: "r"}
			if err := s.Create(ctx, task, CreateOptions{MaxPerOwner: 1 << 30}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *Redis) {
		ctx := context.Background()
		task := benchCreate(b, s, 1)[0]
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, ownerA, task.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkFinish(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *Redis) {
		ctx := context.Background()
		out := Outcome{OutcomeResult, json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)}
		// Tasks are made in batches outside the timer; b.Loop does not allow
		// pausing, so use the classic loop.
		tasks := benchCreate(b, s, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := s.Finish(ctx, ownerA, tasks[i].ID, Completed, "", out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEnqueue(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *Redis) {
		ctx := context.Background()
		task := &Task{Owner: ownerA, TTL: time.Hour, Session: sessA}
		if err := s.Create(ctx, task, CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		msg := []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Enqueue(ctx, ownerA, task.ID, KindProgress, msg, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEnqueueDrain(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *Redis) {
		ctx := context.Background()
		task := &Task{Owner: ownerA, TTL: time.Hour, Session: sessA}
		if err := s.Create(ctx, task, CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		msg := []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Enqueue(ctx, ownerA, task.ID, KindNotification, msg, 0); err != nil {
				b.Fatal(err)
			}
			if m, err := s.Drain(ctx, ownerA, task.ID); err != nil || len(m) != 1 {
				b.Fatal(len(m), err)
			}
		}
	})
}
