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
	f.Add([]byte("data: "+strings.Repeat("y", 40)+"\rdata: "+strings.Repeat("z", 40)+"\n\ndata: "+strings.Repeat("w", 20)+"\n\n"), 0)
	f.Add([]byte("id: "+strings.Repeat("i", 30)+"\ndata: "+strings.Repeat("y", 40)+"\r\ndata: b\n\n"), 0)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 {
			max = -max
		}
		r := NewReader(bytes.NewReader(in), max)
		// A reader with the smallest buffer gathers most lines as long
		// ones (their data a view of the gathered line) and keeps no raw
		// bytes: it must read the same events.
		small := NewReaderSize(bytes.NewReader(in), 16, max)
		small.SkipRaw()
		total := 0
		for n := 0; ; n++ {
			if n > len(in)+1 {
				t.Fatalf("more events than input bytes: the reader loops")
			}
			ev, err := r.Next()
			if small != nil {
				sev, serr := small.Next()
				switch {
				case errors.Is(serr, ErrEventTooLarge) && !errors.Is(err, ErrEventTooLarge):
					// A line gathered past the buffer is checked against
					// the limit as a whole, lone-CR line ends in it
					// included: a smaller buffer may refuse earlier.
					// Compare no further.
					small = nil
				case (err == nil) != (serr == nil) || (err != nil && !errors.Is(serr, err)):
					t.Fatalf("event %d: error %v, with a 16-byte buffer %v", n, err, serr)
				case (ev == nil) != (sev == nil):
					t.Fatalf("event %d: %v, with a 16-byte buffer %v", n, ev, sev)
				case ev != nil:
					want, got := viewSSE(ev), viewSSE(sev)
					want.Raw = ""
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("event %d with a 16-byte buffer and SkipRaw (-want +got):\n%s", n, diff)
					}
				}
			}
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
