package upstream

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// hopByHop are the RFC 9110 §7.6.1 connection-specific headers, never
// forwarded in either direction (plus any named in Connection).
var hopByHop = [...]string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// StripRequestHopByHop and StripResponseHopByHop delete the hop-by-hop
// headers and those the Connection header names. One pass over the headers
// finds which are there (most messages carry none, or only Connection:
// keep-alive); a Del per name would copy, normalize and scan for each of
// the nine names on every request. Two functions, not one over an
// interface: ranging over All through an interface allocates.
func StripRequestHopByHop(h *fasthttp.RequestHeader) {
	var s hopScan
	for k, v := range h.All() {
		s.see(k, v)
	}
	s.strip(h)
}

// StripResponseHopByHop is StripRequestHopByHop for a response.
func StripResponseHopByHop(h *fasthttp.ResponseHeader) {
	var s hopScan
	for k, v := range h.All() {
		s.see(k, v)
	}
	s.strip(h)
}

// hopScan collects the hop-by-hop headers of one message.
type hopScan struct {
	found   [len(hopByHop)]bool
	listed  []string // other headers named by Connection
	present bool
}

func (s *hopScan) see(k, v []byte) {
	i := hopIndex(k)
	if i < 0 {
		return
	}
	s.found[i], s.present = true, true
	if i != 0 { // not Connection
		return
	}
	for name := range bytes.SplitSeq(v, []byte(",")) {
		// "close" is a connection option, not a header name; hop-by-hop
		// names are deleted through found when they are present.
		if name = bytes.TrimSpace(name); len(name) > 0 && hopIndex(name) < 0 && !equalFoldASCII(name, "close") {
			s.listed = append(s.listed, string(name))
		}
	}
}

func (s *hopScan) strip(h interface{ Del(key string) }) {
	if !s.present {
		return
	}
	for _, name := range s.listed {
		h.Del(name)
	}
	for i, f := range s.found {
		if f {
			h.Del(hopByHop[i])
		}
	}
}

// hopIndex returns the index of name in hopByHop (any case), or -1.
func hopIndex(name []byte) int {
	for i, hop := range hopByHop {
		if equalFoldASCII(name, hop) {
			return i
		}
	}
	return -1
}

// equalFoldASCII reports whether b and s are equal ignoring ASCII case.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lowerASCII(b[i]) != lowerASCII(s[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
