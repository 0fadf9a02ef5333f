package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzSSEReader: the reader never panics or loops, never reports more raw
// bytes than it read, and every event re-emitted by AppendRewritten
// reads back with the same id, name, retry and data.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: message\nretry: 10\ndata: a\ndata: b\n\n"), 0)
	f.Add([]byte("data: a\r\rdata: b\r\n\r\n: c\n\n"), 16)
	f.Add([]byte("\n\r\r\ndata: x"), 0)
	f.Add([]byte("data: "+strings.Repeat("y", 20000)+"\n\n"), 1000)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 {
			max = -max
		}
		r := NewReader(bytes.NewReader(in), max)
		total := 0
		for n := 0; ; n++ {
			if n > len(in)+1 {
				t.Fatalf("more events than input bytes: the reader loops")
			}
			ev, err := r.Next()
			if ev != nil {
				total += len(ev.Raw)
				if !bytes.Contains(in, ev.Raw) {
					t.Fatalf("raw %q is not part of the input", ev.Raw)
				}
				if max > 0 && len(ev.Raw) > max {
					t.Fatalf("event of %d bytes over the limit %d", len(ev.Raw), max)
				}
				if err == nil {
					checkSSERoundTrip(t, ev)
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrEventTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
		}
		if total > len(in) {
			t.Fatalf("%d raw bytes from %d input bytes", total, len(in))
		}
	})
}

func checkSSERoundTrip(t *testing.T, ev *Event) {
	t.Helper()
	if bytes.ContainsAny(ev.ID, "\r\n") || bytes.ContainsAny(ev.Name, "\r\n") {
		t.Fatalf("field with a line end: id %q name %q", ev.ID, ev.Name)
	}
	want := viewSSE(ev)
	want.Raw = ""
	if !want.HasID || want.ID == "" {
		// Append writes no id line for an empty id.
		want.ID, want.HasID = "", false
	}
	out := AppendRewritten(nil, ev, ev.Data)
	back, err := NewReader(bytes.NewReader(out), 0).Next()
	if err != nil {
		t.Fatalf("reading back %q: %v", out, err)
	}
	got := viewSSE(back)
	got.Raw = ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round trip through %q mismatch (-want +got):\n%s", out, diff)
	}
}
