package jsonx

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

// TestStrSpecial: the eight-byte test finds every quote, backslash and
// control character at every position, and nothing else.
func TestStrSpecial(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			w := bytes.Repeat([]byte{'a'}, 8)
			w[pos] = byte(c)
			want := c == '"' || c == '\\' || c < 0x20
			if got := strSpecial(binary.LittleEndian.Uint64(w)); got != want {
				t.Errorf("strSpecial(%q) = %v, want %v", w, got, want)
			}
		}
	}
	// High bytes (UTF-8) around a special one must not hide it.
	w := []byte{0xff, 0x80, 0xe2, '"', 0xff, 0xff, 0xff, 0xff}
	if !strSpecial(binary.LittleEndian.Uint64(w)) {
		t.Errorf("strSpecial(%q) = false, want true", w)
	}
}

// TestStrLong: strings longer than a word, with their special byte at each
// offset, scan as encoding/json reads them.
func TestStrLong(t *testing.T) {
	for _, special := range []string{`"`, `\"`, `\\`, `\n`, `\u00e9`, "\n", "\x1f", `\x`, "é"} {
		for n := range 40 {
			in := `"` + strings.Repeat("x", n) + special + strings.Repeat("y", 17) + `"`
			s := Scanner{B: []byte(in)}
			_, err := s.Value()
			if err == nil {
				s.Space()
				if s.I != len(s.B) {
					err = ErrTrailing
				}
			}
			if got, want := err == nil, json.Valid([]byte(in)); got != want {
				t.Errorf("Value(%q): valid %v (%v), encoding/json says %v", in, got, err, want)
			}
		}
	}
}

// BenchmarkStrLarge scans an 8 MiB string, the bulk of a large result.
func BenchmarkStrLarge(b *testing.B) {
	in := []byte(`"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789 ", 8<<20/37) + `"`)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s := Scanner{B: in}
		if _, err := s.Value(); err != nil {
			b.Fatal(err)
		}
	}
}
