package upstream

import (
	"strings"
	"testing"
)

func TestChunkedComplete(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"0\r\n\r\n", true},
		{"5\r\nhello\r\n0\r\n\r\n", true},
		{"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", true},
		{"1A\r\n" + strings.Repeat("x", 26) + "\r\n0\r\n\r\n", true},
		{"5;ext=1\r\nhello\r\n0;last\r\n\r\n", true},
		{"5\r\nhello\r\n0\r\nTrailer: v\r\n\r\n", true},
		{"5\nhello\r\n0\n\n", true}, // bare LF line ends
		{"", false},
		{"5\r\nhel", false},
		{"5\r\nhello\r\n", false},
		{"5\r\nhello\r\n0\r\n", false},               // no end of the trailer section
		{"5\r\nhello\r\n0\r\nTrailer: v\r\n", false}, // trailer not ended
		{"zz\r\nhello\r\n0\r\n\r\n", false},          // not a size
		{"\r\n", false},
		{"123456789\r\nx\r\n0\r\n\r\n", false}, // absurd size
		{"5\r\nhello0\r\n\r\n", false},         // data runs into the size line
	}
	for _, tc := range tests {
		if got := chunkedComplete([]byte(tc.in)); got != tc.want {
			t.Errorf("chunkedComplete(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
