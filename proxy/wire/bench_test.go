package wire

import (
	"strings"
	"testing"
)

var (
	benchSmallCall = []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"progressToken":17}}}`)
	benchLargeCall = []byte(`{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"ingest","arguments":{"rows":[` +
		strings.TrimSuffix(strings.Repeat(`{"id":12345,"name":"row name \u00e9","tags":["a","b"],"v":-1.5e3},`, 1024), ",") + `]}}}`)
)

func BenchmarkParseEnvelope(b *testing.B) {
	if n := len(benchLargeCall); n < 64<<10 {
		b.Fatalf("large call is %d bytes, want >= 64 KiB", n)
	}
	for _, bc := range []struct {
		name string
		msg  []byte
	}{
		{name: "small tools/call", msg: benchSmallCall},
		{name: "64KiB params", msg: benchLargeCall},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.msg)))
			for b.Loop() {
				if _, err := ParseEnvelope(bc.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestParseEnvelopeAllocs is the allocation budget of the envelope parse
// on the hot path: every request pays it, so a new allocation there must be
// a decision, not an accident. Measured: 0 for a tools/call (its method
// is interned, nothing escapes), 1 for a method that is not (the string).
func TestParseEnvelopeAllocs(t *testing.T) {
	tests := []struct {
		name   string
		msg    []byte
		budget float64
	}{
		{name: "small tools/call", msg: benchSmallCall, budget: 0},
		{name: "64KiB tools/call", msg: benchLargeCall, budget: 0},
		{name: "other method", msg: []byte(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x"}}`), budget: 1},
		{name: "response", msg: []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`), budget: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() {
				if _, err := ParseEnvelope(tc.msg); err != nil {
					t.Fatal(err)
				}
			})
			if got > tc.budget {
				t.Errorf("ParseEnvelope allocates %v times per call, budget %v", got, tc.budget)
			}
		})
	}
}
