package stdio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
)

// FuzzChildOutput feeds arbitrary bytes as a child's stdout through the
// line reader and the router of a session with two calls in flight.
// Properties: no panic; a call only ever receives a response with its own
// id; nothing is queued for the GET stream that is a response.
func FuzzChildOutput(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n",
		`{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}` + "\n",
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":1}}` + "\n",
		`{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{}}` + "\n",
		`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":"a","result":{}}]` + "\n",
		"{not json\n\n\r\n",
		`{"jsonrpc":"2.0","ID":1,"Result":{}}` + "\n",
		`{"jsonrpc":"2.0","id":1.0,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":"` + string(bytes.Repeat([]byte("x"), 300)) + `"}}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"tg-1","result":{}}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tg-2-progress"}}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzChildOutput(t, data, false)
		fuzzChildOutput(t, data, true)
	})
}

// fuzzChildOutput checks one input against a session, or in shared mode
// against the shared child with two sessions' calls that use the same id
// and token (taskgate's ids tg-1 and tg-2).
func fuzzChildOutput(t *testing.T, data []byte, shared bool) {
	{
		srv := &Server{cfg: Config{MaxLineSize: 256, QueueMax: 8, Shared: shared}}
		srv.m = newMetrics(nil, srv)
		s := &session{srv: srv, log: zerolog.Nop(), calls: map[string]*call{}, tokens: map[string]*call{},
			get: newQueue(8), ended: make(chan struct{}), shared: shared, child: &child{}}
		ids := []string{`1`, `"a"`}
		if shared {
			ids = []string{`1`, `1`}
		}
		calls := map[string]*call{}
		for i, id := range ids {
			var c *call
			if shared {
				bid := fmt.Sprintf("tg-%d", i+1)
				c = &call{raw: json.RawMessage(id), id: "s:" + bid, token: "s:" + bid + "-progress",
					origToken: json.RawMessage(`"t1"`), q: newQueue(8), view: &view{ids: map[string]string{}}}
				s.calls[c.id], s.tokens[c.token] = c, c
				id = bid
			} else {
				m := message{id: json.RawMessage(id), method: "tools/call", params: json.RawMessage(`{"_meta":{"progressToken":"t` + id + `"}}`)}
				var err error
				if c, err = s.startCall(&m); err != nil {
					t.Fatal(err)
				}
			}
			calls[id] = c
		}
		r := newLineReader(bytes.NewReader(data), srv.cfg.MaxLineSize)
		for {
			line, err := r.next()
			if errors.Is(err, errLineTooLong) {
				s.tooLong(line)
				continue
			}
			if err != nil {
				break
			}
			if len(line) > 0 {
				s.fromChild(append([]byte(nil), line...))
			}
		}
		for id, c := range calls {
			got, _ := c.q.take(nil)
			for _, msg := range got {
				m, err := parseMessage(msg)
				if err != nil {
					t.Fatalf("call %s got a message that is not JSON-RPC: %q", id, msg)
				}
				if m.isResponse() && canonicalID(m.id) != canonicalID(c.raw) {
					t.Fatalf("call %s got the response for id %s", id, m.id)
				}
				if shared && !m.isResponse() && m.method != methodProgress {
					t.Fatalf("shared call %s got %q, which belongs to no call", id, msg)
				}
			}
		}
		got, _ := s.get.take(nil)
		for _, msg := range got {
			if m, err := parseMessage(msg); err != nil || m.isResponse() || shared {
				t.Fatalf("GET stream got %q", msg)
			}
		}
	}
}
