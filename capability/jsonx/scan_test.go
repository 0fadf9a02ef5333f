package jsonx

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// jsonGrammarCases are single JSON values (or not) with whether RFC 8259
// (and encoding/json) accepts them.
var jsonGrammarCases = []struct {
	name  string
	in    string
	valid bool
}{
	{name: "zero", in: `0`, valid: true},
	{name: "negative zero", in: `-0`, valid: true},
	{name: "integer", in: `1234567890`, valid: true},
	{name: "huge integer", in: `123456789012345678901234567890`, valid: true},
	{name: "negative", in: `-17`, valid: true},
	{name: "fraction", in: `3.25`, valid: true},
	{name: "exponent", in: `1e10`, valid: true},
	{name: "exponent upper plus", in: `1E+10`, valid: true},
	{name: "exponent minus", in: `-0.5e-3`, valid: true},
	{name: "leading zero", in: `01`, valid: false},
	{name: "leading zeros fraction", in: `00.5`, valid: false},
	{name: "plus sign", in: `+1`, valid: false},
	{name: "lone minus", in: `-`, valid: false},
	{name: "minus letter", in: `-a`, valid: false},
	{name: "dot first", in: `.5`, valid: false},
	{name: "dot last", in: `1.`, valid: false},
	{name: "dot exponent", in: `1.e5`, valid: false},
	{name: "empty exponent", in: `1e`, valid: false},
	{name: "signed empty exponent", in: `1e+`, valid: false},
	{name: "hex", in: `0x10`, valid: false},
	{name: "NaN", in: `NaN`, valid: false},
	{name: "Infinity", in: `-Infinity`, valid: false},
	{name: "true", in: `true`, valid: true},
	{name: "false", in: `false`, valid: true},
	{name: "null", in: `null`, valid: true},
	{name: "truncated true", in: `tru`, valid: false},
	{name: "long null", in: `nulll`, valid: false},
	{name: "capital True", in: `True`, valid: false},
	{name: "string", in: `"abc"`, valid: true},
	{name: "empty string", in: `""`, valid: true},
	{name: "all short escapes", in: `"\"\\\/\b\f\n\r\t"`, valid: true},
	{name: "unicode escape", in: `"\u00e9\uD83D\uDE00"`, valid: true},
	{name: "lone surrogate escape", in: `"\ud800"`, valid: true},
	{name: "bad escape", in: `"\x41"`, valid: false},
	{name: "escaped single quote", in: `"\'"`, valid: false},
	{name: "short unicode escape", in: `"\u12"`, valid: false},
	{name: "non-hex unicode escape", in: `"\u12G4"`, valid: false},
	{name: "backslash at end", in: `"abc\`, valid: false},
	{name: "unterminated string", in: `"abc`, valid: false},
	{name: "raw newline in string", in: "\"a\nb\"", valid: false},
	{name: "raw NUL in string", in: "\"a\x00b\"", valid: false},
	{name: "raw DEL in string", in: "\"a\x7fb\"", valid: true},
	{name: "single quotes", in: `'a'`, valid: false},
	{name: "empty array", in: `[]`, valid: true},
	{name: "array", in: `[1, "a", [true], {"k": null}]`, valid: true},
	{name: "array trailing comma", in: `[1,]`, valid: false},
	{name: "array leading comma", in: `[,1]`, valid: false},
	{name: "array missing comma", in: `[1 2]`, valid: false},
	{name: "unclosed array", in: `[1`, valid: false},
	{name: "empty object", in: `{}`, valid: true},
	{name: "object", in: `{"a": 1, "b": [2], "c": {"d": "e"}}`, valid: true},
	{name: "object trailing comma", in: `{"a":1,}`, valid: false},
	{name: "object unquoted key", in: `{a:1}`, valid: false},
	{name: "object number key", in: `{1:1}`, valid: false},
	{name: "object missing colon", in: `{"a" 1}`, valid: false},
	{name: "object missing value", in: `{"a":}`, valid: false},
	{name: "unclosed object", in: `{"a":1`, valid: false},
	{name: "whitespace everywhere", in: " \t\r\n{ \"a\" : [ 1 , 2 ] } \n", valid: true},
	{name: "form feed is not whitespace", in: "\f1", valid: false},
	{name: "empty", in: ``, valid: false},
	{name: "only whitespace", in: "  \n", valid: false},
	{name: "NUL byte", in: "\x00", valid: false},
}

func TestScannerValueGrammar(t *testing.T) {
	for _, tc := range jsonGrammarCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := json.Valid([]byte(tc.in)); got != tc.valid {
				t.Fatalf("test case is wrong: json.Valid(%q) = %v", tc.in, got)
			}
			s := Scanner{B: []byte(tc.in)}
			raw, err := s.Value()
			if err == nil {
				s.Space()
				if s.I != len(s.B) {
					err = ErrTrailing
				}
			}
			if got := err == nil; got != tc.valid {
				t.Fatalf("scanner.value(%q) = %q, %v; want valid %v", tc.in, raw, err, tc.valid)
			}
			if err == nil && string(raw) != strings.Trim(tc.in, " \t\r\n") {
				t.Errorf("scanner.value(%q) raw = %q, want the value without surrounding whitespace", tc.in, raw)
			}
		})
	}
}

// TestScannerDepth: nesting beyond MaxDepth is refused with ErrTooDeep,
// without exhausting the stack for very deep input.
func TestScannerDepth(t *testing.T) {
	tests := []struct {
		name    string
		depth   int
		open    string
		close   string
		wantErr error
	}{
		{name: "arrays at limit", depth: MaxDepth, open: "[", close: "]"},
		{name: "arrays over limit", depth: MaxDepth + 1, open: "[", close: "]", wantErr: ErrTooDeep},
		{name: "objects at limit", depth: MaxDepth, open: `{"a":`, close: "}"},
		{name: "objects over limit", depth: MaxDepth + 1, open: `{"a":`, close: "}", wantErr: ErrTooDeep},
		{name: "a million arrays", depth: 1 << 20, open: "[", close: "]", wantErr: ErrTooDeep},
		{name: "a million unclosed objects", depth: 1 << 20, open: `{"a":`, wantErr: ErrTooDeep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Repeat(tc.open, tc.depth) + "1" + strings.Repeat(tc.close, tc.depth)
			s := Scanner{B: []byte(in)}
			_, err := s.Value()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("scanner.value(depth %d) = %v, want %v", tc.depth, err, tc.wantErr)
			}
			if err == nil && s.Depth() != 0 {
				t.Errorf("depth after a balanced value = %d, want 0", s.depth)
			}
		})
	}
}

// TestUnquoteMatchesEncodingJSON: decoded strings are what encoding/json
// decodes, including lone surrogates (U+FFFD) and invalid UTF-8.
func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string // a JSON string literal
	}{
		{name: "plain", in: `"tools/call"`},
		{name: "empty", in: `""`},
		{name: "short escapes", in: `"a\"b\\c\/d\be\ff\ng\rh\ti"`},
		{name: "unicode escapes", in: `"m\u0065thod \u00E9 \u20ac"`},
		{name: "NUL escape", in: `"method\u0000"`},
		{name: "surrogate pair", in: `"\ud83d\ude00"`},
		{name: "lone high surrogate", in: `"a\ud800b"`},
		{name: "lone high surrogate at end", in: `"a\ud800"`},
		{name: "lone low surrogate", in: `"\udc00"`},
		{name: "high then non-low", in: `"\ud800\u0041"`},
		{name: "high then high then low", in: `"\ud800\ud800\udc00"`},
		{name: "high then short escape", in: `"\ud800\n"`},
		{name: "high then raw char", in: `"\ud800x"`},
		{name: "raw UTF-8", in: "\"K\u212a\u017f \U0001F600\""},
		{name: "invalid UTF-8 byte", in: "\"tools/call\xff\""},
		{name: "invalid UTF-8 with escape", in: "\"a\\n\xc3\""},
		{name: "truncated UTF-8 sequence", in: "\"\xe2\x82\""},
		{name: "overlong encoding", in: "\"\xc0\xaf\""},
		{name: "encoded surrogate", in: "\"\xed\xa0\x80\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want string
			if err := json.Unmarshal([]byte(tc.in), &want); err != nil {
				t.Fatalf("test case is wrong: json.Unmarshal(%q): %v", tc.in, err)
			}
			got, ok := UnquoteValue([]byte(tc.in))
			if !ok || got != want {
				t.Errorf("UnquoteValue(%q) = %q, %v; want %q (encoding/json)", tc.in, got, ok, want)
			}
		})
	}
}

func TestUnquoteValueRefusesNonStrings(t *testing.T) {
	for _, in := range []string{``, `"`, `1`, `null`, `"abc`, `{}`} {
		if got, ok := UnquoteValue([]byte(in)); ok {
			t.Errorf("UnquoteValue(%q) = %q, true; want false", in, got)
		}
	}
}
