package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// sseView is an Event as tests compare it.
type sseView struct {
	Raw   string
	ID    string
	HasID bool
	Name  string
	Data  string
	Retry int
}

func viewSSE(ev *Event) sseView {
	return sseView{Raw: string(ev.Raw), ID: string(ev.ID), HasID: ev.HasID, Name: string(ev.Name), Data: string(ev.Data), Retry: ev.Retry}
}

// readAllEvents reads events until an error; it returns the events (a
// partial last one included) and the error that ended the stream.
func readAllEvents(r *Reader) ([]sseView, error) {
	var out []sseView
	for {
		ev, err := r.Next()
		if ev != nil {
			out = append(out, viewSSE(ev))
		}
		if err != nil {
			return out, err
		}
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []sseView
		wantErr error
	}{
		{
			name: "one event",
			in:   "data: {\"a\":1}\n\n",
			want: []sseView{{Raw: "data: {\"a\":1}\n\n", Data: `{"a":1}`, Retry: -1}},
		},
		{
			name: "multi-line data joined with LF",
			in:   "data: a\ndata:b\ndata:  c\ndata\n\n",
			want: []sseView{{Raw: "data: a\ndata:b\ndata:  c\ndata\n\n", Data: "a\nb\n c\n", Retry: -1}},
		},
		{
			name: "CRLF line ends",
			in:   "id: 7\r\ndata: x\r\ndata: y\r\n\r\n",
			want: []sseView{{Raw: "id: 7\r\ndata: x\r\ndata: y\r\n\r\n", ID: "7", HasID: true, Data: "x\ny", Retry: -1}},
		},
		{
			name: "CR line ends",
			in:   "id: 7\rdata: x\rdata: y\r\rdata: z\r\r",
			want: []sseView{
				{Raw: "id: 7\rdata: x\rdata: y\r\r", ID: "7", HasID: true, Data: "x\ny", Retry: -1},
				{Raw: "data: z\r\r", Data: "z", Retry: -1},
			},
		},
		{
			name: "mixed line ends",
			in:   "data: a\rdata: b\r\ndata: c\n\r\n",
			want: []sseView{{Raw: "data: a\rdata: b\r\ndata: c\n\r\n", Data: "a\nb\nc", Retry: -1}},
		},
		{
			name: "CR CR LF is a line and a blank line",
			in:   "data: a\r\r\ndata: b\n\n",
			want: []sseView{
				{Raw: "data: a\r\r\n", Data: "a", Retry: -1},
				{Raw: "data: b\n\n", Data: "b", Retry: -1},
			},
		},
		{
			name: "comments kept in raw, not in data",
			in:   ": keep-alive\ndata: x\n: mid\n\n",
			want: []sseView{{Raw: ": keep-alive\ndata: x\n: mid\n\n", Data: "x", Retry: -1}},
		},
		{
			name: "comment-only event",
			in:   ": ping\n\n",
			want: []sseView{{Raw: ": ping\n\n", Retry: -1}},
		},
		{
			name: "id event and retry fields (H-07 priming)",
			in:   "id: s1-0\nretry: 3000\ndata:\n\nevent: message\nid: s1-1\ndata: {}\n\n",
			want: []sseView{
				{Raw: "id: s1-0\nretry: 3000\ndata:\n\n", ID: "s1-0", HasID: true, Retry: 3000},
				{Raw: "event: message\nid: s1-1\ndata: {}\n\n", ID: "s1-1", HasID: true, Name: "message", Data: "{}", Retry: -1},
			},
		},
		{
			name: "empty id is an id",
			in:   "id\ndata: x\n\n",
			want: []sseView{{Raw: "id\ndata: x\n\n", HasID: true, Data: "x", Retry: -1}},
		},
		{
			name: "id with NUL ignored",
			in:   "id: a\x00b\ndata: x\n\n",
			want: []sseView{{Raw: "id: a\x00b\ndata: x\n\n", Data: "x", Retry: -1}},
		},
		{
			name: "last field wins",
			in:   "id: 1\nid: 2\nevent: a\nevent: b\nretry: 1\nretry: 2\ndata: x\n\n",
			want: []sseView{{Raw: "id: 1\nid: 2\nevent: a\nevent: b\nretry: 1\nretry: 2\ndata: x\n\n", ID: "2", HasID: true, Name: "b", Data: "x", Retry: 2}},
		},
		{
			name: "bad retry ignored",
			in:   "retry: +5\nretry: -1\nretry: 1.5\nretry:\ndata: x\n\n",
			want: []sseView{{Raw: "retry: +5\nretry: -1\nretry: 1.5\nretry:\ndata: x\n\n", Data: "x", Retry: -1}},
		},
		{
			name: "unknown fields ignored",
			in:   "foo: bar\nDATA: y\ndata: x\n\n",
			want: []sseView{{Raw: "foo: bar\nDATA: y\ndata: x\n\n", Data: "x", Retry: -1}},
		},
		{
			name: "only the first space after the colon is dropped",
			in:   "data:   x  \n\n",
			want: []sseView{{Raw: "data:   x  \n\n", Data: "  x  ", Retry: -1}},
		},
		{
			name: "stray blank lines skipped",
			in:   "\n\r\n\rdata: x\n\n\n\n",
			want: []sseView{{Raw: "data: x\n\n", Data: "x", Retry: -1}},
		},
		{
			name: "non-UTF-8 and NUL bytes kept raw",
			in:   "data: \xff\x00\xfe\n\n",
			want: []sseView{{Raw: "data: \xff\x00\xfe\n\n", Data: "\xff\x00\xfe", Retry: -1}},
		},
		{
			name:    "stream ends mid-event",
			in:      "data: x\n\ndata: partial\n",
			want:    []sseView{{Raw: "data: x\n\n", Data: "x", Retry: -1}, {Raw: "data: partial\n", Data: "partial", Retry: -1}},
			wantErr: io.ErrUnexpectedEOF,
		},
		{
			name:    "stream ends mid-line",
			in:      "data: x\n\ndata: part",
			want:    []sseView{{Raw: "data: x\n\n", Data: "x", Retry: -1}, {Raw: "data: part", Retry: -1}},
			wantErr: io.ErrUnexpectedEOF,
		},
		{
			name: "event ended by CR at the end of the stream",
			in:   "data: x\r\r",
			want: []sseView{{Raw: "data: x\r\r", Data: "x", Retry: -1}},
		},
		{
			name: "empty stream",
			in:   "",
		},
		{
			name: "long line beyond the buffer",
			in:   "data: " + strings.Repeat("x", 40<<10) + "\n\n",
			want: []sseView{{Raw: "data: " + strings.Repeat("x", 40<<10) + "\n\n", Data: strings.Repeat("x", 40<<10), Retry: -1}},
		},
		{
			name: "event at the size limit",
			in:   "data: 12\n\n",
			max:  10,
			want: []sseView{{Raw: "data: 12\n\n", Data: "12", Retry: -1}},
		},
		{
			name:    "event over the size limit",
			in:      "data: 123\n\n",
			max:     10,
			wantErr: ErrEventTooLarge,
		},
		{
			name:    "many lines over the size limit",
			in:      strings.Repeat("data: x\n", 100) + "\n",
			max:     64,
			wantErr: ErrEventTooLarge,
		},
		{
			name:    "long line over the size limit",
			in:      "data: " + strings.Repeat("x", 1<<20) + "\n\n",
			max:     64 << 10,
			wantErr: ErrEventTooLarge,
		},
		{
			name: "limit is per event",
			in:   "data: 1234\n\ndata: 5678\n\n",
			max:  12,
			want: []sseView{{Raw: "data: 1234\n\n", Data: "1234", Retry: -1}, {Raw: "data: 5678\n\n", Data: "5678", Retry: -1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr := tc.wantErr
			if wantErr == nil {
				wantErr = io.EOF
			}
			for _, rd := range []struct {
				name string
				r    func(string) io.Reader
			}{
				{name: "whole", r: func(s string) io.Reader { return strings.NewReader(s) }},
				{name: "byte by byte", r: func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) }},
			} {
				got, err := readAllEvents(NewReader(rd.r(tc.in), tc.max))
				if !errors.Is(err, wantErr) {
					t.Fatalf("%s: reading %q: error %v, want %v", rd.name, trunc(tc.in), err, wantErr)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s: events of %q mismatch (-want +got):\n%s", rd.name, trunc(tc.in), diff)
				}
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// TestSSEReaderRawIsVerbatim: concatenating the raw bytes of all events
// gives back the stream, minus stray blank lines between events.
func TestSSEReaderRawIsVerbatim(t *testing.T) {
	in := ": hi\r\nid: 1\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n" +
		"retry: 100\ndata: a\rdata: b\r\r" +
		"data: \xff\n\n"
	evs, err := readAllEvents(NewReader(strings.NewReader(in), 0))
	if !errors.Is(err, io.EOF) {
		t.Fatalf("error %v, want io.EOF", err)
	}
	var raw strings.Builder
	for _, ev := range evs {
		raw.WriteString(ev.Raw)
	}
	if raw.String() != in {
		t.Errorf("raw bytes = %q, want %q", raw.String(), in)
	}
}

func TestAppendSSE(t *testing.T) {
	tests := []struct {
		name string
		id   string
		data string
		want string
	}{
		{name: "no id", data: `{"a":1}`, want: "data: {\"a\":1}\n\n"},
		{name: "id", id: "tg1.x", data: `{}`, want: "id: tg1.x\ndata: {}\n\n"},
		{name: "empty data", data: ``, want: "data: \n\n"},
		{name: "LF in data", data: "{\n\"a\":1\n}", want: "data: {\ndata: \"a\":1\ndata: }\n\n"},
		{name: "CRLF in data", data: "{\r\n}", want: "data: {\ndata: }\n\n"},
		{name: "lone CR in data", data: "{\r}", want: "data: {\ndata: }\n\n"},
		{name: "mixed line ends", data: "a\n\nb\r\rc\r\n", want: "data: a\ndata: \ndata: b\ndata: \ndata: c\ndata: \n\n"},
		{name: "large line", data: strings.Repeat("x", 70000) + "\ny", want: "data: " + strings.Repeat("x", 70000) + "\ndata: y\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(Append(nil, tc.id, []byte(tc.data))); got != tc.want {
				t.Errorf("Append(%q, %q) = %q, want %q", tc.id, tc.data, got, tc.want)
			}
			var b bytes.Buffer
			w := bufio.NewWriterSize(&b, 16)
			if err := Write(w, tc.id, []byte(tc.data)); err != nil || w.Flush() != nil {
				t.Fatalf("Write: %v", err)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("Write(%q, %q) wrote %q, want %q", tc.id, tc.data, got, tc.want)
			}
		})
	}
}

// TestAppendSSERoundTrip: what appendSSE and appendSSERewritten write reads
// back as the same event (data line ends normalized to LF).
func TestAppendSSERoundTrip(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		data string
		want sseView
	}{
		{name: "plain", ev: Event{Retry: -1}, data: `{"jsonrpc":"2.0","id":1,"result":{}}`, want: sseView{Data: `{"jsonrpc":"2.0","id":1,"result":{}}`, Retry: -1}},
		{name: "id, name, retry kept", ev: Event{ID: []byte("ev-9"), HasID: true, Name: []byte("message"), Retry: 2500}, data: `{}`, want: sseView{ID: "ev-9", HasID: true, Name: "message", Data: "{}", Retry: 2500}},
		{name: "empty id kept", ev: Event{HasID: false, Retry: -1}, data: "x", want: sseView{Data: "x", Retry: -1}},
		{name: "multi-line data", ev: Event{Retry: 0}, data: "a\r\nb\rc\nd", want: sseView{Data: "a\nb\nc\nd", Retry: 0}},
		{name: "data with colons and spaces", ev: Event{Retry: -1}, data: " : x: y ", want: sseView{Data: " : x: y ", Retry: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := AppendRewritten([]byte("data: before\n\n"), &tc.ev, []byte(tc.data))
			evs, err := readAllEvents(NewReader(bytes.NewReader(out), 0))
			if !errors.Is(err, io.EOF) || len(evs) != 2 {
				t.Fatalf("reading %q: %d events, error %v; want 2, io.EOF", out, len(evs), err)
			}
			got := evs[1]
			got.Raw = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("round trip of %q mismatch (-want +got):\n%s", out, diff)
			}
		})
	}
}
