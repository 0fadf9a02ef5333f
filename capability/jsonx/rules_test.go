package jsonx

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestValidDepthMatchesEncodingJSON: at EncodingJSONDepth, ValidDepth
// accepts what json.Valid accepts, right at the limit and one past it.
func TestValidDepthMatchesEncodingJSON(t *testing.T) {
	for _, n := range []int{EncodingJSONDepth - 1, EncodingJSONDepth, EncodingJSONDepth + 1} {
		for _, pair := range [][2]string{{"[", "]"}, {`{"a":`, "}"}} {
			in := []byte(strings.Repeat(pair[0], n) + "1" + strings.Repeat(pair[1], n))
			if got, want := ValidDepth(in, EncodingJSONDepth) == nil, json.Valid(in); got != want {
				t.Errorf("depth %d of %s: ValidDepth ok = %v, json.Valid = %v", n, pair[0], got, want)
			}
		}
	}
	for _, tc := range jsonGrammarCases {
		if got := ValidDepth([]byte(tc.in), EncodingJSONDepth) == nil; got != tc.valid {
			t.Errorf("ValidDepth(%q) ok = %v, want %v", tc.in, got, tc.valid)
		}
	}
}

// TestScanObjectDuplicateRule: the whole-object rule refuses any key seen
// twice (after unescaping, also past the pairwise-comparison size) and
// keeps keys differing in case apart.
func TestScanObjectDuplicateRule(t *testing.T) {
	var many strings.Builder
	many.WriteString(`{"k":0`)
	for i := range 20 {
		many.WriteString(`,"k` + strings.Repeat("x", i) + `x":1`)
	}
	many.WriteString(`,"k":2}`)
	for _, in := range []string{`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, many.String()} {
		_, _, err := ScanObject([]byte(in), 0, nil)
		var dup *DupKeyError
		if !errors.As(err, &dup) {
			t.Errorf("ScanObject(%.40q) = %v, want a DupKeyError", in, err)
		}
	}
	if _, _, err := ScanObject([]byte(`{"a":1,"A":2}`), 0, nil); err != nil {
		t.Errorf("ScanObject with keys differing in case = %v, want nil", err)
	}
}

// TestMembersRule: the wanted-names rule refuses a duplicate or a case
// variant of a wanted name only.
func TestMembersRule(t *testing.T) {
	tests := []struct {
		in      string
		names   []string
		wantErr error
	}{
		{in: `{"a":1,"a":2}`, names: []string{"a"}, wantErr: ErrDupMember},
		{in: `{"a":1,"a":2}`, names: []string{"b"}},
		{in: `{"A":1}`, names: []string{"a"}, wantErr: ErrOddMember},
		{in: `{"A":1,"A":2}`, names: []string{"b"}},
		{in: `{"a":1,"A":2}`, names: []string{"a"}, wantErr: ErrOddMember},
	}
	for _, tc := range tests {
		if _, err := Members([]byte(tc.in), tc.names...); !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("Members(%s, %q) = %v, want %v", tc.in, tc.names, err, tc.wantErr)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		method            string
		hasID, hasOutcome bool
		want              Kind
	}{
		{"m", true, false, KindRequest},
		{"m", true, true, KindRequest},
		{"m", false, false, KindNotification},
		{"", true, true, KindResponse},
		{"", false, true, KindResponse},
		{"", true, false, KindNone},
	}
	for _, tc := range tests {
		if got := Classify(tc.method, tc.hasID, tc.hasOutcome); got != tc.want {
			t.Errorf("Classify(%q, %v, %v) = %v, want %v", tc.method, tc.hasID, tc.hasOutcome, got, tc.want)
		}
	}
}
