package jsonx

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSkipValue(t *testing.T) {
	tests := []struct {
		name string
		in   string // value followed by a tail that must not be consumed
		want string
	}{
		{name: "string", in: `"a\"b\\" ,`, want: `"a\"b\\"`},
		{name: "string ending in escaped backslash", in: `"\\\\"]`, want: `"\\\\"`},
		{name: "unicode escape", in: `"\u0022"}`, want: `"\u0022"`},
		{name: "number", in: `-1.5e+3,`, want: `-1.5e+3`},
		{name: "number at end", in: `12`, want: `12`},
		{name: "literal", in: "true\n}", want: `true`},
		{name: "null", in: `null]`, want: `null`},
		{name: "object with brackets in strings", in: `{"a":"}]","b":[{"c":"{"}]} ,`, want: `{"a":"}]","b":[{"c":"{"}]}`},
		{name: "array", in: `[1,[2,[3]],"]"]}`, want: `[1,[2,[3]],"]"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in[:SkipValue([]byte(tt.in), 0)]; got != tt.want {
				t.Errorf("SkipValue(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestScanObject(t *testing.T) {
	type kv struct{ Key, Val string }
	tests := []struct {
		name string
		in   string
		want []kv
	}{
		{name: "empty", in: `{}`, want: nil},
		{name: "empty with space", in: "{ \n }", want: nil},
		{name: "order kept", in: `{"b":1,"a":[2],"c":{"d":3}}`, want: []kv{{"b", "1"}, {"a", "[2]"}, {"c", `{"d":3}`}}},
		{name: "pretty", in: "{\n  \"a\" : \"x\" ,\n  \"b\":null\n}", want: []kv{{"a", `"x"`}, {"b", "null"}}},
		{name: "escaped key is unescaped", in: `{"t\u0061sks":{},"\u00e9":1}`, want: []kv{{"tasks", "{}"}, {"é", "1"}}},
		{name: "invalid UTF-8 key decodes as encoding/json does", in: "{\"k\xff\":1}", want: []kv{{"k\uFFFD", "1"}}},
		{name: "keys differing in case are distinct", in: `{"tasks":1,"Tasks":2}`, want: []kv{{"tasks", "1"}, {"Tasks", "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, end, err := ScanObject([]byte(tt.in), 0, nil)
			if err != nil {
				t.Fatalf("scanObject(%q) error = %v", tt.in, err)
			}
			if end != len(tt.in) {
				t.Errorf("scanObject(%q) end = %d, want %d", tt.in, end, len(tt.in))
			}
			var got []kv
			for _, m := range ms {
				got = append(got, kv{string(m.Key), tt.in[m.VS:m.VE]})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scanObject(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
