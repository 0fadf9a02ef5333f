package capability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// member is one "key": value pair of a scanned JSON object.
type member struct {
	key  []byte // unescaped key; aliases the input when it needed no unescaping
	vs   int    // index of the first byte of the value
	ve   int    // index just after the value
	kind byte   // first byte of the value: '{', '[', '"', 'n', 't', 'f' or a number byte
}

// maxLinearDup is the member count up to which duplicate keys are found by
// pairwise comparison rather than with a map.
const maxLinearDup = 16

// scanObject scans the object that starts at data[i] == '{'. data must be
// valid JSON (json.Valid). It appends the members to buf[:0] and returns them
// with the index just after the closing '}'. A duplicate key is an error
// wrapping ErrMalformed; where names the object in that error.
func scanObject(data []byte, i int, buf []member, where string) ([]member, int, error) {
	ms := buf[:0]
	i = skipSpace(data, i+1)
	if data[i] == '}' {
		return ms, i + 1, nil
	}
	for {
		ke := skipString(data, i)
		key, err := unquote(data[i:ke])
		if err != nil {
			return nil, 0, fmt.Errorf("capability: key in %s: %w", where, ErrMalformed)
		}
		i = skipSpace(data, ke)
		i = skipSpace(data, i+1) // ':'
		ve := skipValue(data, i)
		ms = append(ms, member{key: key, vs: i, ve: ve, kind: data[i]})
		i = skipSpace(data, ve)
		if data[i] == '}' {
			break
		}
		i = skipSpace(data, i+1) // ','
	}
	if k, ok := duplicate(ms); ok {
		return nil, 0, fmt.Errorf("capability: duplicate key %q in %s: %w", k, where, ErrMalformed)
	}
	return ms, i + 1, nil
}

// duplicate reports a key that occurs more than once in ms.
func duplicate(ms []member) ([]byte, bool) {
	if len(ms) <= maxLinearDup {
		for i := 1; i < len(ms); i++ {
			for j := range i {
				if bytes.Equal(ms[i].key, ms[j].key) {
					return ms[i].key, true
				}
			}
		}
		return nil, false
	}
	seen := make(map[string]struct{}, len(ms))
	for _, m := range ms {
		if _, ok := seen[string(m.key)]; ok {
			return m.key, true
		}
		seen[string(m.key)] = struct{}{}
	}
	return nil, false
}

// find returns the member of ms whose key is key.
func find(ms []member, key string) (member, bool) {
	for _, m := range ms {
		if string(m.key) == key {
			return m, true
		}
	}
	return member{}, false
}

// insertAt returns where a new member goes in the object scanned as ms whose
// '{' is at open, and whether it needs a leading comma: right after the last
// value, so that whitespace before '}' stays where it was.
func insertAt(ms []member, open int) (pos int, comma bool) {
	if len(ms) == 0 {
		return open + 1, false
	}
	return ms[len(ms)-1].ve, true
}

// unquote returns the string value of the JSON string token s (with quotes),
// decoded as encoding/json decodes it: escapes resolved and invalid UTF-8
// replaced by U+FFFD. Plain tokens are returned without copying.
func unquote(s []byte) ([]byte, error) {
	body := s[1 : len(s)-1]
	plain := true
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain || (bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body)) {
		return body, nil
	}
	var v string
	if err := json.Unmarshal(s, &v); err != nil {
		return nil, err
	}
	return []byte(v), nil
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just after the string token whose opening
// quote is at data[i].
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '"':
			return i + 1
		case '\\':
			i++ // the escaped byte; \uXXXX digits need no care
		}
	}
	return i // unreachable for valid JSON
}

// structural marks the bytes skipValue must look at inside containers.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// skipValue returns the index just after the value that starts at data[i].
// data must be valid JSON; nesting depth costs no stack.
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			c := data[i]
			if !structural[c] {
				continue
			}
			switch c {
			case '"':
				i = skipString(data, i) - 1
			case '{', '[':
				depth++
			default: // '}', ']'
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default: // number, true, false, null
		for i < len(data) {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// edit replaces data[start:end] with pre+val+post (an insertion when
// start == end).
type edit struct {
	start, end     int
	pre, val, post string
}

// splice applies edits, which must not overlap, to data in one new buffer.
func splice(data []byte, edits []edit) []byte {
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	n := len(data)
	for _, e := range edits {
		n += len(e.pre) + len(e.val) + len(e.post) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	last := 0
	for _, e := range edits {
		out = append(out, data[last:e.start]...)
		out = append(out, e.pre...)
		out = append(out, e.val...)
		out = append(out, e.post...)
		last = e.end
	}
	return append(out, data[last:]...)
}
