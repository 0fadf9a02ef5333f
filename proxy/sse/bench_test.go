package sse

import (
	"bytes"
	"strings"
	"testing"
)

// BenchmarkReadLargeEvent reads one event carrying an 8 MiB result through
// a 4 KiB buffer, as a task's runner reads its upstream's answer.
func BenchmarkReadLargeEvent(b *testing.B) {
	in := []byte("id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" +
		strings.Repeat("x", 8<<20) + "\"}]}}\n\n")
	for _, skip := range []bool{false, true} {
		name := "raw"
		if skip {
			name = "SkipRaw"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				r := NewReaderSize(bytes.NewReader(in), 4<<10, 32<<20)
				if skip {
					r.SkipRaw()
				}
				ev, err := r.Next()
				if err != nil || len(ev.Data) < 8<<20 {
					b.Fatalf("Next: %v", err)
				}
			}
		})
	}
}

// BenchmarkAppendLarge writes an 8 MiB message as one event.
func BenchmarkAppendLarge(b *testing.B) {
	data := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 8<<20) + `"}]}}`)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if out := Append(nil, "e1", data); len(out) < len(data) {
			b.Fatal("short")
		}
	}
}
