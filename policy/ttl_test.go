package policy

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestTTL(t *testing.T) {
	std := Default().Defaults // default 1h, min 1s, max 24h
	fine := std
	fine.MinTTL = time.Millisecond
	tests := []struct {
		name      string
		s         Settings
		requested json.RawMessage
		want      time.Duration
	}{
		{name: "absent", s: std, requested: nil, want: time.Hour},
		{name: "empty", s: std, requested: json.RawMessage(""), want: time.Hour},
		{name: "null", s: std, requested: json.RawMessage("null"), want: time.Hour},
		{name: "null with spaces", s: std, requested: json.RawMessage(" null\n"), want: time.Hour},
		{name: "zero", s: std, requested: json.RawMessage("0"), want: time.Second},
		{name: "minus zero", s: std, requested: json.RawMessage("-0"), want: time.Second},
		{name: "negative", s: std, requested: json.RawMessage("-5000"), want: time.Second},
		{name: "below min", s: std, requested: json.RawMessage("999"), want: time.Second},
		{name: "at min", s: std, requested: json.RawMessage("1000"), want: time.Second},
		{name: "within range", s: std, requested: json.RawMessage("60000"), want: time.Minute},
		{name: "within range spaces", s: std, requested: json.RawMessage(" 60000 "), want: time.Minute},
		{name: "exponent", s: std, requested: json.RawMessage("6e4"), want: time.Minute},
		{name: "fraction rounds down", s: std, requested: json.RawMessage("3600000.4"), want: time.Hour},
		{name: "fraction rounds half up", s: fine, requested: json.RawMessage("1.5"), want: 2 * time.Millisecond},
		{name: "fraction rounds 2.5 up", s: fine, requested: json.RawMessage("2.5"), want: 3 * time.Millisecond},
		{name: "1.5 below min", s: std, requested: json.RawMessage("1.5"), want: time.Second},
		{name: "at max", s: std, requested: json.RawMessage("86400000"), want: 24 * time.Hour},
		{name: "above max", s: std, requested: json.RawMessage("86400001"), want: 24 * time.Hour},
		{name: "10^12", s: std, requested: json.RawMessage("1000000000000"), want: 24 * time.Hour},
		{name: "1e300", s: std, requested: json.RawMessage("1e300"), want: 24 * time.Hour},
		{name: "1e400 overflows float64", s: std, requested: json.RawMessage("1e400"), want: 24 * time.Hour},
		{name: "-1e400", s: std, requested: json.RawMessage("-1e400"), want: time.Second},
		{name: "tiny", s: std, requested: json.RawMessage("1e-400"), want: time.Second},
		{name: "max int64 ms", s: std, requested: json.RawMessage("9223372036854775807"), want: 24 * time.Hour},
		{name: "string", s: std, requested: json.RawMessage(`"60000"`), want: time.Hour},
		{name: "bool", s: std, requested: json.RawMessage("true"), want: time.Hour},
		{name: "object", s: std, requested: json.RawMessage(`{"ms":5}`), want: time.Hour},
		{name: "array", s: std, requested: json.RawMessage("[60000]"), want: time.Hour},
		{name: "leading zero", s: std, requested: json.RawMessage("060000"), want: time.Hour},
		{name: "trailing dot", s: std, requested: json.RawMessage("60000."), want: time.Hour},
		{name: "hex", s: std, requested: json.RawMessage("0x10"), want: time.Hour},
		{name: "underscore", s: std, requested: json.RawMessage("60_000"), want: time.Hour},
		{name: "NaN", s: std, requested: json.RawMessage("NaN"), want: time.Hour},
		{name: "Infinity", s: std, requested: json.RawMessage("Infinity"), want: time.Hour},
		{name: "plus sign", s: std, requested: json.RawMessage("+60000"), want: time.Hour},
		{name: "two numbers", s: std, requested: json.RawMessage("1 2"), want: time.Hour},
		{name: "zero settings", s: Settings{}, requested: json.RawMessage("5"), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.TTL(tt.requested); got != tt.want {
				t.Errorf("TTL(%q) = %v, want %v", tt.requested, got, tt.want)
			}
		})
	}
}

func FuzzTTL(f *testing.F) {
	for _, s := range []string{
		"", "null", "0", "-1", "1.5", `"60000"`, "1000000000000", "1e300", "1e400", "-1e400",
		"9223372036854775807", "60000", "true", "{}", "0.4999999999999999", "86399999.5",
	} {
		f.Add([]byte(s), uint32(1000), uint32(3_600_000), uint32(86_400_000))
	}
	f.Fuzz(func(t *testing.T, raw []byte, minMS, defMS, maxMS uint32) {
		// Build valid settings (0 < min <= default <= max, whole ms), as
		// Parse guarantees, from arbitrary bounds.
		lo := time.Duration(minMS%1e9+1) * time.Millisecond
		def := lo + time.Duration(defMS)*time.Millisecond
		hi := def + time.Duration(maxMS)*time.Millisecond
		s := Settings{MinTTL: lo, DefaultTTL: def, MaxTTL: hi}
		got := s.TTL(raw)
		if got < s.MinTTL || got > s.MaxTTL {
			t.Errorf("TTL(%q) = %v, want within [%v, %v]", raw, got, s.MinTTL, s.MaxTTL)
		}
		if got%time.Millisecond != 0 {
			t.Errorf("TTL(%q) = %v, want whole milliseconds", raw, got)
		}
		if !isJSONNumber(bytes.Trim(raw, " \t\r\n")) && got != s.DefaultTTL {
			t.Errorf("TTL(%q) = %v, want DefaultTTL %v for a non-number", raw, got, s.DefaultTTL)
		}
	})
}
