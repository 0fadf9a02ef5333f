package proxy

import (
	"errors"
	"unicode/utf8"
)

// maxDepth bounds JSON nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

var (
	errSyntax   = errors.New("invalid JSON")
	errTooDeep  = errors.New("JSON nested too deeply")
	errTrailing = errors.New("data after the JSON value")
)

// scanner validates and skips JSON values in place without allocating. It is
// stricter than encoding/json only where that protects the proxy (depth); it
// accepts exactly RFC 8259 otherwise. Strings are not checked for UTF-8
// validity: the upstream decides what to do with them.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value skips one value starting at s.i (after whitespace) and returns its
// raw bytes.
func (s *scanner) value() ([]byte, error) {
	s.ws()
	if s.i >= len(s.b) {
		return nil, errSyntax
	}
	start := s.i
	var err error
	switch c := s.b[s.i]; {
	case c == '{':
		err = s.object(nil)
	case c == '[':
		err = s.array()
	case c == '"':
		_, _, err = s.str()
	case c == 't':
		err = s.lit("true")
	case c == 'f':
		err = s.lit("false")
	case c == 'n':
		err = s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		err = s.num()
	default:
		err = errSyntax
	}
	if err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

func (s *scanner) lit(w string) error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return errSyntax
	}
	s.i += len(w)
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) num() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return errSyntax
	}
	if s.b[s.i] == '0' {
		s.i++
	} else if s.digits() == 0 {
		return errSyntax
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return errSyntax
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return errSyntax
		}
	}
	return nil
}

// str skips a string starting at the opening quote and returns its content
// (without quotes, still escaped) and whether it contains escapes.
func (s *scanner) str() (content []byte, escaped bool, err error) {
	s.i++ // opening quote
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			content = s.b[start:s.i]
			s.i++
			return content, escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return nil, false, errSyntax
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 {
					return nil, false, errSyntax
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return nil, false, errSyntax
					}
				}
				s.i += 5
			default:
				return nil, false, errSyntax
			}
		case c < 0x20:
			return nil, false, errSyntax
		default:
			s.i++
		}
	}
	return nil, false, errSyntax
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// object skips an object; for each member it calls member (when non-nil)
// with the raw key content, whether it was escaped, and the raw value.
func (s *scanner) object(member func(key []byte, escaped bool, val []byte) error) error {
	s.depth++
	if s.depth > maxDepth {
		return errTooDeep
	}
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return errSyntax
		}
		key, esc, err := s.str()
		if err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errSyntax
		}
		s.i++
		val, err := s.value()
		if err != nil {
			return err
		}
		if member != nil {
			if err := member(key, esc, val); err != nil {
				return err
			}
		}
		s.ws()
		if s.i >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

func (s *scanner) array() error {
	s.depth++
	if s.depth > maxDepth {
		return errTooDeep
	}
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if _, err := s.value(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// unquote decodes the content of a JSON string (as returned by str) the way
// encoding/json does: invalid UTF-8 bytes and lone surrogates become U+FFFD,
// so a decoded name is what a Go upstream sees. It allocates only the
// result string.
func unquote(content []byte, escaped bool) (string, bool) {
	b, ok := unquoteBytes(content, escaped)
	return string(b), ok
}

// unquoteBytes is unquote without the string: it returns content itself
// when there is nothing to decode, so comparing names allocates nothing.
func unquoteBytes(content []byte, escaped bool) ([]byte, bool) {
	if !escaped && utf8.Valid(content) {
		return content, true
	}
	out := make([]byte, 0, len(content))
	for i := 0; i < len(content); {
		c := content[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(content[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, content[i:i+size]...)
			}
			i += size
			continue
		}
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		i++
		switch content[i] {
		case '"', '\\', '/':
			out = append(out, content[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(content[i+1 : i+5])
			i += 4 // i is on the last hex digit
			switch {
			case r >= 0xD800 && r < 0xDC00 && i+6 < len(content) && content[i+1] == '\\' && content[i+2] == 'u':
				if r2 := hex4(content[i+3 : i+7]); r2 >= 0xDC00 && r2 < 0xE000 {
					r = (r-0xD800)<<10 + (r2 - 0xDC00) + 0x10000
					i += 6
				} else {
					r = utf8.RuneError
				}
			case r >= 0xD800 && r < 0xE000:
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
		i++
	}
	return out, true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
