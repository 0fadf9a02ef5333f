package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// FuzzParseEnvelope: the parser never panics; syntax errors
// are exactly what encoding/json finds invalid; and an accepted message's
// method and id are what map[string]json.RawMessage decoding sees under the
// exact keys "method" and "id", so no policy decision can be made on a
// method the upstream would read differently.
func FuzzParseEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{"ttl":60000}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"a","result":{}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","m\u0065thod":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"method\u0000":"tools/call","method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"paramſ":{},"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/c\u0061ll"}`,
		`{"jsonrpc":"2.0","id":1,"method":"\ud800tools/call"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\xff\"}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\x00\"}",
		"{\"jsonrpc\":\"2.0\",\x00\"method\":\"a\"}",
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"}]`,
		`[]`,
		`[[]]`,
		`[1,{"jsonrpc":"2.0","method":"x"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"` + strings.Repeat("x", 4<<10) + `"}}`,
		`{"jsonrpc":"2.0","method":"x","params":` + strings.Repeat("[", jsonx.MaxDepth+1) + strings.Repeat("]", jsonx.MaxDepth+1) + `}`,
		`{"jsonrpc":"2.0","id":-0,"method":"x"} `,
		`{"jsonrpc":"2.0","id":1e2,"method":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := append([]byte(nil), b...)
		env, err := ParseEnvelope(b)
		if !bytes.Equal(b, orig) {
			t.Fatalf("ParseEnvelope modified its input")
		}
		valid := json.Valid(b)
		switch {
		case errors.Is(err, jsonx.ErrTooDeep):
			return
		case errors.Is(err, jsonx.ErrSyntax), errors.Is(err, jsonx.ErrTrailing):
			if valid {
				t.Fatalf("ParseEnvelope(%q) = %v, but json.Valid accepts it", b, err)
			}
			return
		case err != nil:
			if !valid {
				t.Fatalf("ParseEnvelope(%q) = %v, but the input is not valid JSON", b, err)
			}
			return
		}
		if !valid {
			t.Fatalf("ParseEnvelope(%q) accepted invalid JSON", b)
		}
		if env.Batch == nil {
			checkAgainstEncodingJSON(t, b, env)
			return
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil {
			t.Fatalf("accepted batch %q: encoding/json: %v", b, err)
		}
		if len(elems) != len(env.Batch) {
			t.Fatalf("batch %q: %d elements, encoding/json sees %d", b, len(env.Batch), len(elems))
		}
		for i, el := range elems {
			checkAgainstEncodingJSON(t, el, env.Batch[i])
		}
	})
}

func checkAgainstEncodingJSON(t *testing.T, b []byte, env Envelope) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("accepted %q: encoding/json: %v", b, err)
	}
	var want string
	if raw, ok := m["method"]; ok {
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("accepted %q with a non-string method: %v", b, err)
		}
	}
	if env.Method != want {
		t.Fatalf("ParseEnvelope(%q) method = %q, encoding/json sees %q", b, env.Method, want)
	}
	if raw, ok := m["id"]; string(raw) != string(env.ID) || ok != (env.ID != nil) {
		t.Fatalf("ParseEnvelope(%q) id = %q, encoding/json sees %q", b, env.ID, raw)
	}
	if raw, ok := m["params"]; string(raw) != string(env.Params) || ok != (env.Params != nil) {
		t.Fatalf("ParseEnvelope(%q) params = %q, encoding/json sees %q", b, env.Params, raw)
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		t.Fatalf("ParseEnvelope(%q) accepted jsonrpc %q", b, m["jsonrpc"])
	}
}
