package jsonx

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// MaxDepth bounds JSON nesting for a Scanner, so that hostile input cannot
// exhaust the stack.
const MaxDepth = 512

// EncodingJSONDepth is the nesting limit of encoding/json (json.Valid and
// json.Unmarshal refuse deeper input). ValidDepth with this limit accepts
// exactly what json.Valid accepts.
const EncodingJSONDepth = 10000

// Syntax errors: input that is not JSON, nested deeper than the limit, or
// followed by more than whitespace. A JSON-RPC peer answers all three with
// a parse error.
var (
	ErrSyntax   = errors.New("invalid JSON")
	ErrTooDeep  = errors.New("JSON nested too deeply")
	ErrTrailing = errors.New("data after the JSON value")
)

// Scanner validates and skips JSON values in place without allocating. It
// is stricter than encoding/json only in its depth limit (MaxDepth; see
// ValidDepth for another); it accepts exactly RFC 8259 otherwise. Strings
// are not checked for UTF-8 validity: the reader of the value decides what
// to do with them.
//
// B is the input and I the read position: callers that walk a container
// themselves (a batch, an array) move I over the punctuation they consume.
type Scanner struct {
	B []byte
	I int
	// depth counts open containers from base; the limit is always
	// depth > MaxDepth (one comparison with a constant on the hot path), so
	// a limit of max starts depth at base = MaxDepth-max.
	depth, base int
}

// Depth is the current nesting depth (0 after a balanced value).
func (s *Scanner) Depth() int { return s.depth - s.base }

func (s *Scanner) enter() error {
	s.depth++
	if s.depth > MaxDepth {
		return ErrTooDeep
	}
	return nil
}

// Valid reports the syntax error of b as one JSON text (whitespace around
// the value allowed), or nil. Nesting deeper than MaxDepth is ErrTooDeep.
func Valid(b []byte) error { return ValidDepth(b, MaxDepth) }

// ValidDepth is Valid with the nesting limit max.
func ValidDepth(b []byte, max int) error {
	s := Scanner{B: b, depth: MaxDepth - max, base: MaxDepth - max}
	if _, err := s.Value(); err != nil {
		return err
	}
	s.Space()
	if s.I != len(b) {
		return ErrTrailing
	}
	return nil
}

// Space skips whitespace.
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Value skips one value starting at s.I (after whitespace) and returns its
// raw bytes.
func (s *Scanner) Value() ([]byte, error) {
	s.Space()
	if s.I >= len(s.B) {
		return nil, ErrSyntax
	}
	start := s.I
	var err error
	switch c := s.B[s.I]; {
	case c == '{':
		err = s.Object(nil)
	case c == '[':
		err = s.array()
	case c == '"':
		_, _, err = s.Str()
	case c == 't':
		err = s.lit("true")
	case c == 'f':
		err = s.lit("false")
	case c == 'n':
		err = s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		err = s.num()
	default:
		err = ErrSyntax
	}
	if err != nil {
		return nil, err
	}
	return s.B[start:s.I], nil
}

func (s *Scanner) lit(w string) error {
	if len(s.B)-s.I < len(w) || string(s.B[s.I:s.I+len(w)]) != w {
		return ErrSyntax
	}
	s.I += len(w)
	return nil
}

func (s *Scanner) digits() int {
	n := 0
	for s.I < len(s.B) && s.B[s.I] >= '0' && s.B[s.I] <= '9' {
		s.I++
		n++
	}
	return n
}

func (s *Scanner) num() error {
	if s.B[s.I] == '-' {
		s.I++
	}
	if s.I >= len(s.B) {
		return ErrSyntax
	}
	if s.B[s.I] == '0' {
		s.I++
	} else if s.digits() == 0 {
		return ErrSyntax
	}
	if s.I < len(s.B) && s.B[s.I] == '.' {
		s.I++
		if s.digits() == 0 {
			return ErrSyntax
		}
	}
	if s.I < len(s.B) && (s.B[s.I] == 'e' || s.B[s.I] == 'E') {
		s.I++
		if s.I < len(s.B) && (s.B[s.I] == '+' || s.B[s.I] == '-') {
			s.I++
		}
		if s.digits() == 0 {
			return ErrSyntax
		}
	}
	return nil
}

// Str skips a string starting at the opening quote and returns its content
// (without quotes, still escaped) and whether it contains escapes.
func (s *Scanner) Str() (content []byte, escaped bool, err error) {
	s.I++ // opening quote
	start := s.I
	for s.I < len(s.B) {
		// Eight plain bytes at a time: a large result is mostly one long
		// string, skipped here at several times the speed of the byte loop.
		for s.I+8 <= len(s.B) && !strSpecial(binary.LittleEndian.Uint64(s.B[s.I:])) {
			s.I += 8
		}
		if s.I >= len(s.B) {
			break
		}
		c := s.B[s.I]
		switch {
		case c == '"':
			content = s.B[start:s.I]
			s.I++
			return content, escaped, nil
		case c == '\\':
			escaped = true
			s.I++
			if s.I >= len(s.B) {
				return nil, false, ErrSyntax
			}
			switch s.B[s.I] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.I++
			case 'u':
				if len(s.B)-s.I < 5 {
					return nil, false, ErrSyntax
				}
				for _, h := range s.B[s.I+1 : s.I+5] {
					if !isHex(h) {
						return nil, false, ErrSyntax
					}
				}
				s.I += 5
			default:
				return nil, false, ErrSyntax
			}
		case c < 0x20:
			return nil, false, ErrSyntax
		default:
			s.I++
		}
	}
	return nil, false, ErrSyntax
}

// strSpecial reports whether any of the eight bytes in x (read little
// endian) ends a plain run of a string: a quote, a backslash or a control
// character. Each test is the classic "has a zero byte" bit trick
// ((v - 0x01..) &^ v & 0x80..), exact as a yes/no answer.
func strSpecial(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (lo * '"')
	bslash := x ^ (lo * '\\')
	return ((quote-lo)&^quote|(bslash-lo)&^bslash|(x-lo*0x20)&^x)&hi != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// Object skips an object; for each member it calls member (when non-nil)
// with the raw key content, whether it was escaped, and the raw value.
func (s *Scanner) Object(member func(key []byte, escaped bool, val []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.I++ // {
	s.Space()
	if s.I < len(s.B) && s.B[s.I] == '}' {
		s.I++
		s.depth--
		return nil
	}
	for {
		s.Space()
		if s.I >= len(s.B) || s.B[s.I] != '"' {
			return ErrSyntax
		}
		key, esc, err := s.Str()
		if err != nil {
			return err
		}
		s.Space()
		if s.I >= len(s.B) || s.B[s.I] != ':' {
			return ErrSyntax
		}
		s.I++
		val, err := s.Value()
		if err != nil {
			return err
		}
		if member != nil {
			if err := member(key, esc, val); err != nil {
				return err
			}
		}
		s.Space()
		if s.I >= len(s.B) {
			return ErrSyntax
		}
		switch s.B[s.I] {
		case ',':
			s.I++
		case '}':
			s.I++
			s.depth--
			return nil
		default:
			return ErrSyntax
		}
	}
}

func (s *Scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.I++ // [
	s.Space()
	if s.I < len(s.B) && s.B[s.I] == ']' {
		s.I++
		s.depth--
		return nil
	}
	for {
		if _, err := s.Value(); err != nil {
			return err
		}
		s.Space()
		if s.I >= len(s.B) {
			return ErrSyntax
		}
		switch s.B[s.I] {
		case ',':
			s.I++
		case ']':
			s.I++
			s.depth--
			return nil
		default:
			return ErrSyntax
		}
	}
}

// Unquote decodes the content of a JSON string (as returned by Str) the way
// encoding/json does: invalid UTF-8 bytes and lone surrogates become U+FFFD,
// so a decoded name is what a Go peer sees. It allocates only the result
// string.
func Unquote(content []byte, escaped bool) (string, bool) {
	b, ok := UnquoteBytes(content, escaped)
	return string(b), ok
}

// UnquoteValue decodes a raw JSON string value (with its quotes, as the
// value slices of Object and Members are); ok is false when v does not start
// with a valid JSON string. Bytes after the string are not looked at.
func UnquoteValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	s := Scanner{B: v}
	content, esc, err := s.Str()
	if err != nil {
		return "", false
	}
	return Unquote(content, esc)
}

// UnquoteBytes is Unquote without the string: it returns content itself
// when there is nothing to decode, so comparing names allocates nothing.
func UnquoteBytes(content []byte, escaped bool) ([]byte, bool) {
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
