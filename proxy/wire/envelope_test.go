package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// envView is an envelope as tests compare it (strings instead of slices,
// presence made explicit).
type envView struct {
	ID        string
	HasID     bool
	Method    string
	Params    string
	HasParams bool
	Result    bool
	Error     bool
	Batch     []envView
}

func viewOf(e Envelope) envView {
	v := envView{
		ID: string(e.ID), HasID: e.ID != nil,
		Method: e.Method,
		Params: string(e.Params), HasParams: e.Params != nil,
		Result: e.HasResult, Error: e.HasError,
	}
	for _, el := range e.Batch {
		v.Batch = append(v.Batch, viewOf(el))
	}
	return v
}

func req(id, method, params string) envView {
	return envView{ID: id, HasID: id != "", Method: method, Params: params, HasParams: params != ""}
}

func TestParseEnvelope(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	huge := strings.Repeat("x", 4<<20)
	tests := []struct {
		name    string
		in      string
		want    envView
		wantErr error
	}{
		// Valid messages.
		{
			name: "request",
			in:   `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
			want: req("1", "tools/call", `{"name":"echo","arguments":{}}`),
		},
		{
			name: "notification",
			in:   `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			want: req("", "notifications/initialized", ""),
		},
		{
			name: "response",
			in:   `{"jsonrpc":"2.0","id":"a-1","result":{"content":[]}}`,
			want: envView{ID: `"a-1"`, HasID: true, Result: true},
		},
		{
			name: "error response with null id",
			in:   `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
			want: envView{ID: "null", HasID: true, Error: true},
		},
		{
			name: "error response with id",
			in:   `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"nope"}}`,
			want: envView{ID: "7", HasID: true, Error: true},
		},
		{name: "string id", in: `{"jsonrpc":"2.0","id":"abc","method":"ping"}`, want: req(`"abc"`, "ping", "")},
		{name: "empty string id", in: `{"jsonrpc":"2.0","id":"","method":"ping"}`, want: req(`""`, "ping", "")},
		{name: "zero id", in: `{"jsonrpc":"2.0","id":0,"method":"ping"}`, want: req("0", "ping", "")},
		{name: "negative id", in: `{"jsonrpc":"2.0","id":-42,"method":"ping"}`, want: req("-42", "ping", "")},
		{
			name: "id beyond int64 kept raw",
			in:   `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`,
			want: req("123456789012345678901234567890", "ping", ""),
		},
		{
			name: "members in any order and whitespace",
			in:   " \n{ \"params\" : [1] ,\t\"method\":\"x\", \"id\" : \"q\" , \"jsonrpc\" : \"2.0\" }\r\n",
			want: req(`"q"`, "x", "[1]"),
		},
		{
			name: "unknown members ignored, nested method ignored",
			in:   `{"jsonrpc":"2.0","id":1,"method":"a","extra":{"method":"b","Method":"c"},"_meta":{}}`,
			want: req("1", "a", ""),
		},
		{
			name: "escaped member name decodes to method",
			in:   `{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call"}`,
			want: req("1", "tools/call", ""),
		},
		{
			name: "escaped method value",
			in:   `{"jsonrpc":"2.0","id":1,"method":"tools\/c\u0061ll"}`,
			want: req("1", "tools/call", ""),
		},
		{
			name: `"method\u0000" is an unknown member`,
			in:   `{"jsonrpc":"2.0","id":1,"method\u0000":"tools/call"}`,
			want: envView{ID: "1", HasID: true},
		},
		{
			name: "member with trailing space is unknown",
			in:   `{"jsonrpc":"2.0","id":1,"method ":"tools/call","method":"ping"}`,
			want: req("1", "ping", ""),
		},
		{name: "null params kept raw", in: `{"jsonrpc":"2.0","method":"x","params":null}`, want: req("", "x", "null")},
		{name: "huge string param", in: `{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"` + huge + `"}}`, want: req("1", "x", `{"s":"`+huge+`"}`)},
		{name: "params nested to the limit", in: `{"jsonrpc":"2.0","method":"x","params":` + deep(jsonx.MaxDepth-1) + `}`, want: req("", "x", deep(jsonx.MaxDepth-1))},

		// Batches (H-04: none in 2025-11-25; parsed so they can be refused
		// or passed per element).
		{
			name: "batch",
			in:   `[{"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","method":"notifications/x"}]`,
			want: envView{Batch: []envView{req("1", "ping", ""), req("", "notifications/x", "")}},
		},
		{name: "empty batch", in: `[]`, wantErr: errEmptyBatch},
		{name: "empty batch with space", in: `[ ]`, wantErr: errEmptyBatch},
		{name: "nested batch", in: `[[{"jsonrpc":"2.0","method":"x"}]]`, wantErr: errNestedBatch},
		{name: "nested batch after element", in: `[{"jsonrpc":"2.0","method":"x"},[]]`, wantErr: errNestedBatch},
		{name: "non-object element", in: `[1]`, wantErr: jsonx.ErrNotObject},
		{name: "string element", in: `[{"jsonrpc":"2.0","method":"x"},"y"]`, wantErr: jsonx.ErrNotObject},
		{name: "batch element duplicate", in: `[{"jsonrpc":"2.0","method":"x","method":"tools/call"}]`, wantErr: jsonx.ErrDupMember},
		{name: "batch element odd case", in: `[{"jsonrpc":"2.0","Method":"x"}]`, wantErr: jsonx.ErrOddMember},
		{name: "batch trailing comma", in: `[{"jsonrpc":"2.0","method":"x"},]`, wantErr: jsonx.ErrSyntax},
		{name: "unclosed batch", in: `[{"jsonrpc":"2.0","method":"x"}`, wantErr: jsonx.ErrSyntax},
		{name: "batch then data", in: `[{"jsonrpc":"2.0","method":"x"}] 1`, wantErr: jsonx.ErrTrailing},

		// Duplicates: encoding/json keeps the last one, so a parser that kept the
		// first would route on a method the upstream never sees.
		{name: "duplicate method", in: `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, wantErr: jsonx.ErrDupMember},
		{name: "duplicate method via escape", in: `{"jsonrpc":"2.0","id":1,"method":"ping","m\u0065thod":"tools/call"}`, wantErr: jsonx.ErrDupMember},
		{name: "duplicate id", in: `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, wantErr: jsonx.ErrDupMember},
		{name: "duplicate params", in: `{"jsonrpc":"2.0","id":1,"method":"x","params":{},"params":{"task":{}}}`, wantErr: jsonx.ErrDupMember},
		{name: "duplicate jsonrpc", in: `{"jsonrpc":"2.0","jsonrpc":"2.0","method":"x"}`, wantErr: jsonx.ErrDupMember},
		{name: "duplicate result", in: `{"jsonrpc":"2.0","id":1,"result":{},"result":{}}`, wantErr: jsonx.ErrDupMember},
		{name: "duplicate error", in: `{"jsonrpc":"2.0","id":1,"error":{},"error":{}}`, wantErr: jsonx.ErrDupMember},

		// Case variants (encoding/json struct decoding folds case).
		{name: "Method", in: `{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`, wantErr: jsonx.ErrOddMember},
		{name: "Method besides method", in: `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}`, wantErr: jsonx.ErrOddMember},
		{name: "PARAMS", in: `{"jsonrpc":"2.0","id":1,"method":"x","PARAMS":{}}`, wantErr: jsonx.ErrOddMember},
		{name: "ID", in: `{"jsonrpc":"2.0","ID":1,"method":"x"}`, wantErr: jsonx.ErrOddMember},
		{name: "JSONRPC", in: `{"JSONRPC":"2.0","method":"x"}`, wantErr: jsonx.ErrOddMember},
		{name: "long s in params", in: `{"jsonrpc":"2.0","method":"x","param\u017f":{}}`, wantErr: jsonx.ErrOddMember},
		{name: "raw long s in jsonrpc", in: "{\"j\u017fonrpc\":\"2.0\",\"jsonrpc\":\"2.0\",\"method\":\"x\"}", wantErr: jsonx.ErrOddMember},
		{name: "long s in result", in: `{"jsonrpc":"2.0","id":1,"re\u017fult":{}}`, wantErr: jsonx.ErrOddMember},
		{name: "escaped capital", in: `{"jsonrpc":"2.0","id":1,"\u004dethod":"x"}`, wantErr: jsonx.ErrOddMember},
		{name: "syntax error wins over odd member", in: `{"jsonrpc":"2.0","Method":"x",}`, wantErr: jsonx.ErrSyntax},

		// jsonrpc.
		{name: "missing jsonrpc", in: `{"id":1,"method":"ping"}`, wantErr: errBadVersion},
		{name: "jsonrpc 1.0", in: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, wantErr: errBadVersion},
		{name: "jsonrpc number", in: `{"jsonrpc":2.0,"id":1,"method":"ping"}`, wantErr: errBadVersion},
		{name: "jsonrpc with space", in: `{"jsonrpc":"2.0 ","id":1,"method":"ping"}`, wantErr: errBadVersion},
		{name: "jsonrpc null", in: `{"jsonrpc":null,"method":"ping"}`, wantErr: errBadVersion},

		// method and id types (L-09: ids are strings or integers; null only
		// in responses).
		{name: "numeric method", in: `{"jsonrpc":"2.0","id":1,"method":1}`, wantErr: errBadMethod},
		{name: "null method", in: `{"jsonrpc":"2.0","id":1,"method":null}`, wantErr: errBadMethod},
		{name: "fractional id", in: `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, wantErr: errBadID},
		{name: "exponent id", in: `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, wantErr: errBadID},
		{name: "bool id", in: `{"jsonrpc":"2.0","id":true,"method":"ping"}`, wantErr: errBadID},
		{name: "object id", in: `{"jsonrpc":"2.0","id":{},"method":"ping"}`, wantErr: errBadID},
		{name: "array id", in: `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, wantErr: errBadID},
		{name: "null id in a request", in: `{"jsonrpc":"2.0","id":null,"method":"tools/call"}`, wantErr: errBadID},

		// Not a message, trailing data, syntax.
		{name: "string", in: `"x"`, wantErr: jsonx.ErrNotObject},
		{name: "number", in: `1`, wantErr: jsonx.ErrNotObject},
		{name: "null", in: `null`, wantErr: jsonx.ErrNotObject},
		{name: "empty", in: ``, wantErr: jsonx.ErrSyntax},
		{name: "whitespace", in: " \r\n\t", wantErr: jsonx.ErrSyntax},
		{name: "garbage", in: `hello`, wantErr: jsonx.ErrSyntax},
		{name: "second object", in: `{"jsonrpc":"2.0","method":"x"}{"jsonrpc":"2.0","method":"y"}`, wantErr: jsonx.ErrTrailing},
		{name: "trailing garbage", in: `{"jsonrpc":"2.0","method":"x"} x`, wantErr: jsonx.ErrTrailing},
		{name: "trailing NUL", in: "{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\x00", wantErr: jsonx.ErrTrailing},
		{name: "NUL inside", in: "{\"jsonrpc\":\"2.0\",\x00\"method\":\"x\"}", wantErr: jsonx.ErrSyntax},
		{name: "raw NUL in method", in: "{\"jsonrpc\":\"2.0\",\"method\":\"x\x00\"}", wantErr: jsonx.ErrSyntax},
		{name: "invalid escape", in: `{"jsonrpc":"2.0","method":"\q"}`, wantErr: jsonx.ErrSyntax},
		{name: "short unicode escape", in: `{"jsonrpc":"2.0","method":"\u00"}`, wantErr: jsonx.ErrSyntax},
		{name: "unterminated", in: `{"jsonrpc":"2.0","method":"x"`, wantErr: jsonx.ErrSyntax},
		{name: "leading zero in params", in: `{"jsonrpc":"2.0","method":"x","params":[01]}`, wantErr: jsonx.ErrSyntax},
		{name: "bad number id", in: `{"jsonrpc":"2.0","id":-,"method":"x"}`, wantErr: jsonx.ErrSyntax},
		{name: "too deep", in: `{"jsonrpc":"2.0","method":"x","params":` + deep(jsonx.MaxDepth) + `}`, wantErr: jsonx.ErrTooDeep},
		{name: "far too deep", in: `{"jsonrpc":"2.0","method":"x","params":` + strings.Repeat(`{"a":`, 1<<20), wantErr: jsonx.ErrTooDeep},
		{name: "deep batch", in: strings.Repeat("[", 1<<20), wantErr: jsonx.ErrTooDeep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if len(in) > 80 {
				in = in[:80] + "…"
			}
			env, err := ParseEnvelope([]byte(tc.in))
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("ParseEnvelope(%q) = %v, want %v", in, err, tc.wantErr)
			}
			if err != nil {
				// Only syntax errors may be invalid JSON (fail closed: what
				// the parser refuses as a message is still JSON).
				syntax := errors.Is(err, jsonx.ErrSyntax) || errors.Is(err, jsonx.ErrTrailing) || errors.Is(err, jsonx.ErrTooDeep)
				if !syntax && !json.Valid([]byte(tc.in)) {
					t.Errorf("ParseEnvelope(%q) = %v but the input is not valid JSON", in, err)
				}
				if errors.Is(err, jsonx.ErrSyntax) || errors.Is(err, jsonx.ErrTrailing) {
					if json.Valid([]byte(tc.in)) {
						t.Errorf("ParseEnvelope(%q) = %v but json.Valid accepts it", in, err)
					}
				}
				return
			}
			if diff := cmp.Diff(tc.want, viewOf(env)); diff != "" {
				t.Errorf("ParseEnvelope(%q) mismatch (-want +got):\n%s", in, diff)
			}
		})
	}
}

// TestParseEnvelopeIsRequest: isRequest needs both a method and an id.
func TestParseEnvelopeIsRequest(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{in: `{"jsonrpc":"2.0","id":1,"method":"tasks/get"}`, want: true},
		{in: `{"jsonrpc":"2.0","id":"x","method":"tasks/get"}`, want: true},
		{in: `{"jsonrpc":"2.0","method":"tasks/get"}`, want: false},
		{in: `{"jsonrpc":"2.0","id":1,"result":{}}`, want: false},
	}
	for _, tc := range tests {
		env, err := ParseEnvelope([]byte(tc.in))
		if err != nil {
			t.Fatalf("ParseEnvelope(%q) = %v", tc.in, err)
		}
		if got := env.IsRequest(); got != tc.want {
			t.Errorf("ParseEnvelope(%q).IsRequest() = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestInternMethod: the routed methods come back as the package constants
// (so routing compares equal strings and no copy is kept).
func TestInternMethod(t *testing.T) {
	for _, m := range []string{MethodInitialize, MethodToolsList, MethodToolsCall, MethodTasksGet, MethodTasksResult, MethodTasksList, MethodTasksCancel} {
		env, err := ParseEnvelope([]byte(`{"jsonrpc":"2.0","id":1,"method":"` + m + `"}`))
		if err != nil || env.Method != m {
			t.Errorf("ParseEnvelope(method %q) = %q, %v", m, env.Method, err)
		}
	}
}

// TestParseEnvelopeKind: every message gets the kind its members make.
func TestParseEnvelopeKind(t *testing.T) {
	tests := []struct {
		in   string
		want jsonx.Kind
	}{
		{in: `{"jsonrpc":"2.0","id":1,"method":"tasks/get"}`, want: jsonx.KindRequest},
		{in: `{"jsonrpc":"2.0","id":"x","method":"x"}`, want: jsonx.KindRequest},
		{in: `{"jsonrpc":"2.0","method":"tasks/get"}`, want: jsonx.KindNotification},
		{in: `{"jsonrpc":"2.0","id":1,"result":{}}`, want: jsonx.KindResponse},
		{in: `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}`, want: jsonx.KindResponse},
		{in: `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`, want: jsonx.KindResponse},
		{in: `{"jsonrpc":"2.0","result":{}}`, want: jsonx.KindResponse},
		{in: `{"jsonrpc":"2.0","method":"","id":1,"result":{}}`, want: jsonx.KindResponse},
		{in: `{"jsonrpc":"2.0","id":1,"method":"x","result":{}}`, want: jsonx.KindRequest},
		{in: `{"jsonrpc":"2.0","id":1}`, want: jsonx.KindNone},
		{in: `{"jsonrpc":"2.0","method":"","id":1}`, want: jsonx.KindNone},
		{in: `[{"jsonrpc":"2.0","method":"x"}]`, want: jsonx.KindBatch},
	}
	for _, tc := range tests {
		env, err := ParseEnvelope([]byte(tc.in))
		if err != nil {
			t.Fatalf("ParseEnvelope(%q) = %v", tc.in, err)
		}
		if env.Kind != tc.want {
			t.Errorf("ParseEnvelope(%q).kind = %v, want %v", tc.in, env.Kind, tc.want)
		}
	}
}
