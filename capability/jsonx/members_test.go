package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMembers(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		names   []string
		want    []string // "<nil>" for absent
		wantErr error
	}{
		{name: "found and absent", obj: `{"name":"echo","task":{"ttl":1000},"x":1}`, names: []string{"name", "task", "missing"}, want: []string{`"echo"`, `{"ttl":1000}`, "<nil>"}},
		{name: "no names", obj: `{"a":1}`, want: []string{}},
		{name: "empty object", obj: ` { } `, names: []string{"a"}, want: []string{"<nil>"}},
		{name: "escaped key", obj: `{"n\u0061me":"x"}`, names: []string{"name"}, want: []string{`"x"`}},
		{name: "nested keys not seen", obj: `{"a":{"name":1}}`, names: []string{"name"}, want: []string{"<nil>"}},
		{name: "whitespace kept out of values", obj: `{ "a" :  [1, 2]  }`, names: []string{"a"}, want: []string{`[1, 2]`}},
		{name: "NUL-suffixed key is another key", obj: `{"task\u0000":{}}`, names: []string{"task"}, want: []string{"<nil>"}},
		{name: "case variant of an unwanted name is fine", obj: `{"Other":1,"name":"x"}`, names: []string{"name"}, want: []string{`"x"`}},
		{name: "duplicate", obj: `{"task":{},"task":{"ttl":1}}`, names: []string{"task"}, wantErr: ErrDupMember},
		{name: "duplicate via escape", obj: `{"task":{},"t\u0061sk":{}}`, names: []string{"task"}, wantErr: ErrDupMember},
		{name: "duplicate null", obj: `{"task":null,"task":null}`, names: []string{"task"}, wantErr: ErrDupMember},
		{name: "odd case", obj: `{"Task":{}}`, names: []string{"task"}, wantErr: ErrOddMember},
		{name: "Kelvin sign", obj: "{\"tas\u212a\":{}}", names: []string{"task"}, wantErr: ErrOddMember},
		{name: "escaped Kelvin sign", obj: `{"tas\u212a":{}}`, names: []string{"task"}, wantErr: ErrOddMember},
		{name: "long s", obj: `{"ta\u017fk":{}}`, names: []string{"task"}, wantErr: ErrOddMember},
		{name: "not an object", obj: `[1]`, names: []string{"a"}, wantErr: ErrNotObject},
		{name: "string", obj: `"a"`, names: []string{"a"}, wantErr: ErrNotObject},
		{name: "empty", obj: ``, names: []string{"a"}, wantErr: ErrNotObject},
		{name: "invalid", obj: `{"a":}`, names: []string{"a"}, wantErr: ErrSyntax},
		{name: "too deep", obj: `{"a":` + strings.Repeat("[", MaxDepth) + `}`, names: []string{"a"}, wantErr: ErrTooDeep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := Members([]byte(tc.obj), tc.names...)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Members(%q, %q) = %v, want %v", tc.obj, tc.names, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			got := make([]string, len(vals))
			for i, v := range vals {
				if v == nil {
					got[i] = "<nil>"
				} else {
					got[i] = string(v)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Members(%q, %q) mismatch (-want +got):\n%s", tc.obj, tc.names, diff)
			}
		})
	}
}

func TestSetMember(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		key     string
		val     string
		want    string
		wantErr error
	}{
		{name: "replace", obj: `{"a":1,"b":2,"c":3}`, key: "b", val: `"x"`, want: `{"a":1,"b":"x","c":3}`},
		{name: "append", obj: `{"a":1}`, key: "_meta", val: `{}`, want: `{"a":1,"_meta":{}}`},
		{name: "into empty", obj: `{}`, key: "a", val: `null`, want: `{"a":null}`},
		{name: "into empty with space", obj: " { \n} ", key: "a", val: `1`, want: `{"a":1}`},
		{name: "whitespace between members dropped, values kept", obj: "{ \"a\" : [1, 2] ,\n\"b\":2 }", key: "b", val: `3`, want: `{"a":[1, 2],"b":3}`},
		{name: "duplicates collapse to one", obj: `{"a":1,"b":2,"a":3}`, key: "a", val: `9`, want: `{"a":9,"b":2}`},
		{name: "escaped key replaced, spelling kept", obj: `{"\u0061":1}`, key: "a", val: `2`, want: `{"\u0061":2}`},
		{name: "other escaped keys kept", obj: `{"x\"y":1}`, key: "a", val: `2`, want: `{"x\"y":1,"a":2}`},
		{name: "case variant is another key", obj: `{"A":1}`, key: "a", val: `2`, want: `{"A":1,"a":2}`},
		{name: "nested same key untouched", obj: `{"o":{"a":1}}`, key: "a", val: `2`, want: `{"o":{"a":1},"a":2}`},
		{name: "related-task meta", obj: `{"progressToken":1}`, key: "io.modelcontextprotocol/related-task", val: `{"taskId":"t"}`, want: `{"progressToken":1,"io.modelcontextprotocol/related-task":{"taskId":"t"}}`},
		{name: "not an object", obj: `[]`, key: "a", val: `1`, wantErr: ErrNotObject},
		{name: "invalid", obj: `{"a":1,}`, key: "a", val: `1`, wantErr: ErrSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetMember([]byte(tc.obj), tc.key, []byte(tc.val))
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("SetMember(%q, %q, %q) = %v, want %v", tc.obj, tc.key, tc.val, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if string(got) != tc.want {
				t.Errorf("SetMember(%q, %q, %q) = %s, want %s", tc.obj, tc.key, tc.val, got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("SetMember(%q, %q, %q) = %s: not valid JSON", tc.obj, tc.key, tc.val, got)
			}
		})
	}
}

func TestDeleteMember(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		key     string
		want    string
		wantErr error
	}{
		{name: "first", obj: `{"task":{"ttl":1},"name":"x","arguments":{}}`, key: "task", want: `{"name":"x","arguments":{}}`},
		{name: "middle", obj: `{"name":"x","task":{},"arguments":{}}`, key: "task", want: `{"name":"x","arguments":{}}`},
		{name: "last", obj: `{"name":"x","task":{}}`, key: "task", want: `{"name":"x"}`},
		{name: "only", obj: `{"task":{}}`, key: "task", want: `{}`},
		{name: "absent", obj: `{ "name" : "x" }`, key: "task", want: `{"name":"x"}`},
		{name: "all duplicates", obj: `{"task":1,"a":2,"task":3}`, key: "task", want: `{"a":2}`},
		{name: "escaped spelling", obj: `{"t\u0061sk":1,"a":2}`, key: "task", want: `{"a":2}`},
		{name: "case variant kept", obj: `{"Task":1}`, key: "task", want: `{"Task":1}`},
		{name: "nested kept", obj: `{"_meta":{"task":1}}`, key: "task", want: `{"_meta":{"task":1}}`},
		{name: "not an object", obj: `null`, key: "task", wantErr: ErrNotObject},
		{name: "invalid", obj: `{"task":}`, key: "task", wantErr: ErrSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeleteMember([]byte(tc.obj), tc.key)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("DeleteMember(%q, %q) = %v, want %v", tc.obj, tc.key, err, tc.wantErr)
			}
			if err == nil && string(got) != tc.want {
				t.Errorf("DeleteMember(%q, %q) = %s, want %s", tc.obj, tc.key, got, tc.want)
			}
		})
	}
}

// TestEditObjectDoesNotAlias: the result is a new buffer; the input is
// untouched (callers keep using the request body).
func TestEditObjectDoesNotAlias(t *testing.T) {
	obj := []byte(`{"name":"x","task":{}}`)
	orig := string(obj)
	out, err := DeleteMember(obj, "task")
	if err != nil {
		t.Fatal(err)
	}
	out = append(out[:0], "XXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	_ = out
	if string(obj) != orig {
		t.Errorf("deleteMember changed its input: %q", obj)
	}
}

// FuzzSetMember: setMember and deleteMember on a valid object give a valid
// object whose members (as encoding/json decodes them) are the input's with
// key set or removed.
func FuzzSetMember(f *testing.F) {
	f.Add([]byte(`{"name":"x","task":{"ttl":1}}`), "task", []byte(`{}`))
	f.Add([]byte(`{}`), "_meta", []byte(`{"io.modelcontextprotocol/related-task":{"taskId":"t"}}`))
	f.Add([]byte(`{"a":1,"a":2,"b":3}`), "a", []byte(`null`))
	f.Add([]byte(`{"t\u0061sk":1}`), "task", []byte(`"x"`))
	f.Add([]byte(` { "A" : [1, {"a":2}] } `), "a", []byte(`[]`))
	f.Add([]byte(`[]`), "a", []byte(`1`))
	f.Fuzz(func(t *testing.T, obj []byte, key string, val []byte) {
		set, serr := SetMember(obj, key, val)
		del, derr := DeleteMember(obj, key)
		var in map[string]json.RawMessage
		if json.Unmarshal(obj, &in) != nil || in == nil || !json.Valid(val) || !plainKey(key) {
			return // preconditions of setMember do not hold; only no panic
		}
		if errors.Is(serr, ErrTooDeep) || errors.Is(derr, ErrTooDeep) {
			return
		}
		if serr != nil || derr != nil {
			t.Fatalf("setMember/DeleteMember(%q, %q) = %v, %v on a valid object", obj, key, serr, derr)
		}
		for _, c := range []struct {
			name string
			out  []byte
			want map[string]string
		}{
			{name: "setMember", out: set, want: decodedMembers(in, key, compact(t, val))},
			{name: "deleteMember", out: del, want: decodedMembers(in, key, "")},
		} {
			if !json.Valid(c.out) {
				t.Fatalf("%s(%q, %q) = %q: invalid JSON", c.name, obj, key, c.out)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(c.out, &got); err != nil {
				t.Fatalf("%s(%q, %q) = %q: %v", c.name, obj, key, c.out, err)
			}
			if diff := cmp.Diff(c.want, decodedMembers(got, "", "")); diff != "" {
				t.Fatalf("%s(%q, %q) = %q: members mismatch (-want +got):\n%s", c.name, obj, key, c.out, diff)
			}
		}
	})
}

// plainKey reports whether key can be written between quotes unescaped.
func plainKey(key string) bool {
	for _, c := range []byte(key) {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func compact(t *testing.T, v []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		t.Fatalf("json.Compact(%q): %v", v, err)
	}
	return b.String()
}

// decodedMembers turns m into compacted strings, with key set to val (or
// removed when val is "").
func decodedMembers(m map[string]json.RawMessage, key, val string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		var b bytes.Buffer
		_ = json.Compact(&b, v)
		out[k] = b.String()
	}
	if key != "" {
		delete(out, key)
		if val != "" {
			out[key] = val
		}
	}
	return out
}
