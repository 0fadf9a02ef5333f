package stdio

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskgate/taskgate/proxy/sse"
)

// trickle writes its input to a pipe in pieces of n bytes, the way a child
// flushes a message in several writes.
func trickle(data string, n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < len(data); i += n {
			if _, err := pw.Write([]byte(data[i:min(i+n, len(data))])); err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	return pr
}

type lineResult struct {
	Line    string
	TooLong bool
}

func readLines(t *testing.T, r io.Reader, max int) []lineResult {
	t.Helper()
	lr := newLineReader(r, max)
	var out []lineResult
	for {
		line, err := lr.next()
		switch {
		case errors.Is(err, errLineTooLong):
			out = append(out, lineResult{Line: string(line), TooLong: true})
		case errors.Is(err, io.EOF):
			return out
		case err != nil:
			t.Fatalf("next: %v", err)
		default:
			out = append(out, lineResult{Line: string(line)})
		}
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // longer than the bufio buffer
	tests := []struct {
		name  string
		in    string
		max   int
		piece int
		want  []lineResult
	}{
		{name: "lines", in: "{\"a\":1}\n{\"b\":2}\n", max: 100, piece: 1 << 20,
			want: []lineResult{{Line: `{"a":1}`}, {Line: `{"b":2}`}}},
		{name: "partial writes of one byte", in: "{\"a\":1}\n{\"b\":2}\n", max: 100, piece: 1,
			want: []lineResult{{Line: `{"a":1}`}, {Line: `{"b":2}`}}},
		{name: "crlf and empty lines", in: "{}\r\n\n\n{}\n", max: 10, piece: 3,
			want: []lineResult{{Line: `{}`}, {Line: ""}, {Line: ""}, {Line: `{}`}}},
		{name: "last line without newline", in: "{}\n{\"end\":true}", max: 100, piece: 4,
			want: []lineResult{{Line: `{}`}, {Line: `{"end":true}`}}},
		{name: "line at the limit", in: "12345\n", max: 5, piece: 2, want: []lineResult{{Line: "12345"}}},
		{name: "line over the limit is dropped, the next is read", in: "123456\n{}\n", max: 5, piece: 2,
			want: []lineResult{{Line: "123456", TooLong: true}, {Line: "{}"}}},
		{name: "long line over the buffer within the limit", in: long + "\n{}\n", max: len(long), piece: 7000,
			want: []lineResult{{Line: long}, {Line: "{}"}}},
		{name: "long line over the limit keeps a prefix", in: long + "\n{}\n", max: 1000, piece: 7000,
			want: []lineResult{{Line: long[:prefixMax], TooLong: true}, {Line: "{}"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readLines(t, trickle(tt.in, tt.piece), tt.max)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lines of %.40q (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseMessage(t *testing.T) {
	tests := []struct {
		in       string
		err      error
		method   string
		id       string
		response bool
	}{
		{in: `{"jsonrpc":"2.0","id":1,"result":{}}`, id: "1", response: true},
		{in: `{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}`, id: `"a"`, response: true},
		{in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`, response: true},
		{in: `{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}`, id: "7", method: "elicitation/create"},
		{in: `{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`, method: "notifications/progress"},
		{in: `{"jsonrpc":"2.0","id":1}`, err: errNotMessage},
		{in: `{"jsonrpc":"1.0","id":1,"result":{}}`, err: errNotMessage},
		{in: `{"jsonrpc":"2.0","method":5}`, err: errNotMessage},
		{in: `[1,2]`, err: errNotMessage},
		{in: `not json at all`, err: errNotJSON},
		{in: `{"jsonrpc":"2.0","id":1,"result":{}`, err: errNotJSON},
		{in: `{"jsonrpc":"2.0","id":1,"result":{}} trailing`, err: errNotJSON},
	}
	for _, tt := range tests {
		m, err := parseMessage([]byte(tt.in))
		if !errors.Is(err, tt.err) {
			t.Errorf("parseMessage(%q) error = %v, want %v", tt.in, err, tt.err)
			continue
		}
		if err != nil {
			continue
		}
		if m.method != tt.method || string(m.id) != tt.id || m.isResponse() != tt.response {
			t.Errorf("parseMessage(%q) = method %q id %s response %v, want %q %s %v",
				tt.in, m.method, m.id, m.isResponse(), tt.method, tt.id, tt.response)
		}
	}
}

func TestCanonicalID(t *testing.T) {
	same := [][2]string{{`"a"`, `"\u0061"`}, {`1`, `1.0`}, {`10`, `1e1`}}
	for _, p := range same {
		if canonicalID([]byte(p[0])) != canonicalID([]byte(p[1])) {
			t.Errorf("canonicalID(%s) != canonicalID(%s)", p[0], p[1])
		}
	}
	if canonicalID([]byte(`"1"`)) == canonicalID([]byte(`1`)) {
		t.Error(`canonicalID("1") == canonicalID(1): a string and a number id must differ`)
	}
}

func TestPrefixID(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":42,"result":{"content":[{"text":"xxxx`, "n:42"},
		{`{"result":{"a":"b"},"id":"k","jsonrpc"`, "s:k"},
		{`{"jsonrpc":"2.0","result":{"content":"xxxxxx`, ""},
		{`[`, ""},
	}
	for _, tt := range tests {
		if got := prefixID([]byte(tt.in)); got != tt.want {
			t.Errorf("prefixID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	in := []byte("{\n  \"jsonrpc\": \"2.0\",\r\n  \"method\": \"x\"\n}")
	out := oneLine(in)
	if bytes.IndexByte(out, '\n') >= 0 {
		t.Fatalf("oneLine kept a newline: %q", out)
	}
	if _, err := parseMessage(out); err != nil {
		t.Fatalf("oneLine(%q) = %q, not a message: %v", in, out, err)
	}
	flat := []byte(`{"a":1}`)
	if got := oneLine(flat); &got[0] != &flat[0] {
		t.Error("oneLine copied a message without newlines")
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "npx -y @modelcontextprotocol/server-memory", want: []string{"npx", "-y", "@modelcontextprotocol/server-memory"}},
		{in: `  prog   'a b'  "c \"d\" $HOME" e\ f  `, want: []string{"prog", "a b", `c "d" $HOME`, "e f"}},
		{in: `prog ''`, want: []string{"prog", ""}},
		{in: `prog a|b >x`, want: []string{"prog", "a|b", ">x"}},
		{in: `prog 'open`, err: true},
		{in: `prog "open`, err: true},
		{in: `prog \`, err: true},
		{in: "   ", err: true},
	}
	for _, tt := range tests {
		got, err := SplitCommand(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("SplitCommand(%q) error = %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); !tt.err && diff != "" {
			t.Errorf("SplitCommand(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestQueueDropsOnlyNotifications(t *testing.T) {
	q := newQueue(3)
	q.push([]byte("req1"), false, false)
	for i := range 5 {
		q.push([]byte{'n', byte('0' + i)}, true, false)
	}
	q.push([]byte("req2"), false, false)
	got, end := q.take(nil)
	want := []string{"req1", "n4", "req2"}
	var gs []string
	for _, m := range got {
		gs = append(gs, string(m))
	}
	if diff := cmp.Diff(want, gs); diff != "" || end {
		t.Errorf("queue after overflow (-want +got):\n%s (end %v)", diff, end)
	}
}

func TestConfigValidateNeverShowsValues(t *testing.T) {
	c := Config{Command: []string{"x"}, Env: []string{"TOKEN"}}
	if err := c.validate(); err == nil {
		t.Fatal("an entry without '=' was accepted")
	}
	c.Env = []string{"=s3cret-value"}
	err := c.validate()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("validate() = %v; want an error without the value", err)
	}
}

func TestReadCappedCutsLongStderrLines(t *testing.T) {
	long := strings.Repeat("e", 3*stderrLineMax)
	br := bufio.NewReaderSize(strings.NewReader(long+"\nshort\nlast"), 16)
	var got []string
	for {
		line, err := readCapped(br, stderrLineMax)
		if line != "" || err == nil {
			got = append(got, line)
		}
		if err != nil {
			break
		}
	}
	want := []string{long[:stderrLineMax] + "…", "short", "last"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stderr lines (-want +got):\n%s", diff)
	}
}

// TestStreamSplitsCarriageReturns: a child's message with a carriage
// return between its tokens (JSON whitespace, but a line end in SSE) goes
// out as data lines that an SSE reader joins back into one event whose
// data is the same JSON value; messages without one go out as one line.
func TestStreamSplitsCarriageReturns(t *testing.T) {
	msgs := []string{"{\"jsonrpc\":\"2.0\",\r\"method\":\"a\"}", `{"jsonrpc":"2.0","method":"b"}`, "{\"jsonrpc\":\r\n\"2.0\",\"method\":\"c\"}"}
	q := newQueue(16)
	for _, m := range msgs {
		if _, ok := q.push([]byte(m), false, false); !ok {
			t.Fatal("push refused")
		}
	}
	q.close()
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	if !writeStream(w, q, time.Minute, nil) {
		t.Fatal("writeStream reported a failed write")
	}
	_ = w.Flush()
	stream := out.String()
	r := sse.NewReader(&out, 1<<20)
	for i, m := range msgs {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v (stream %q)", i, err, stream)
		}
		var got, want any
		if err := json.Unmarshal(ev.Data, &got); err != nil {
			t.Fatalf("event %d: data %q is not JSON: %v", i, ev.Data, err)
		}
		_ = json.Unmarshal([]byte(m), &want)
		if !reflect.DeepEqual(got, want) || bytes.IndexByte(ev.Data, '\r') >= 0 {
			t.Fatalf("event %d: data %q, want the value of %q", i, ev.Data, m)
		}
	}
	if !strings.Contains(stream, "event: message\ndata: "+msgs[1]+"\n\n") {
		t.Fatalf("a message without a carriage return is no longer one data line: %q", stream)
	}
}
