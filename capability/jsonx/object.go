package jsonx

import (
	"bytes"
	"errors"
	"slices"
)

// Positional scanning and splicing of JSON that is already known to be
// valid (ValidDepth passed): ScanObject lists an object's members with
// their value positions so that a caller can edit the message in place,
// keeping every byte it does not change. These functions do not validate;
// on invalid input their results are meaningless (but they do not panic on
// input that ValidDepth accepted).

// Member is one "key": value pair of a scanned JSON object.
type Member struct {
	Key  []byte // unescaped key; aliases the input when it needed no unescaping
	VS   int    // index of the first byte of the value
	VE   int    // index just after the value
	Kind byte   // first byte of the value: '{', '[', '"', 'n', 't', 'f' or a number byte
}

// DupKeyError is ScanObject's error for a key that occurs twice.
type DupKeyError struct{ Key []byte }

func (e *DupKeyError) Error() string { return "duplicate key " + string(e.Key) }

// ErrBadKey is ScanObject's error for a key that does not decode.
var ErrBadKey = errors.New("key does not decode")

// maxLinearDup is the member count up to which duplicate keys are found by
// pairwise comparison rather than with a map.
const maxLinearDup = 16

// ScanObject scans the object that starts at data[i] == '{'. data must be
// valid JSON. It appends the members to buf[:0] and returns them with the
// index just after the closing '}'.
//
// The whole-object rule: any key that occurs twice (after unescaping) is a
// *DupKeyError; keys match exactly, so "tasks" and "Tasks" are two distinct
// keys and no error. This is the rule for rewriting a peer's answer in
// place: an edit of one member must not leave a second member of the same
// name that a reader could take instead, while a key differing in case is
// a different member for the MCP client that reads it (unlike Members'
// rule, which guards what the proxy routes on against encoding/json's
// case-insensitive matching at the upstream).
func ScanObject(data []byte, i int, buf []Member) ([]Member, int, error) {
	ms := buf[:0]
	i = SkipSpace(data, i+1)
	if data[i] == '}' {
		return ms, i + 1, nil
	}
	for {
		ke := SkipString(data, i)
		key, ok := UnquoteBytes(data[i+1:ke-1], bytes.IndexByte(data[i+1:ke-1], '\\') >= 0)
		if !ok {
			return nil, 0, ErrBadKey
		}
		i = SkipSpace(data, ke)
		i = SkipSpace(data, i+1) // ':'
		ve := SkipValue(data, i)
		ms = append(ms, Member{Key: key, VS: i, VE: ve, Kind: data[i]})
		i = SkipSpace(data, ve)
		if data[i] == '}' {
			break
		}
		i = SkipSpace(data, i+1) // ','
	}
	if k, ok := duplicate(ms); ok {
		return nil, 0, &DupKeyError{Key: k}
	}
	return ms, i + 1, nil
}

// duplicate reports a key that occurs more than once in ms.
func duplicate(ms []Member) ([]byte, bool) {
	if len(ms) <= maxLinearDup {
		for i := 1; i < len(ms); i++ {
			for j := range i {
				if bytes.Equal(ms[i].Key, ms[j].Key) {
					return ms[i].Key, true
				}
			}
		}
		return nil, false
	}
	seen := make(map[string]struct{}, len(ms))
	for _, m := range ms {
		if _, ok := seen[string(m.Key)]; ok {
			return m.Key, true
		}
		seen[string(m.Key)] = struct{}{}
	}
	return nil, false
}

// Find returns the member of ms whose key is key.
func Find(ms []Member, key string) (Member, bool) {
	for _, m := range ms {
		if string(m.Key) == key {
			return m, true
		}
	}
	return Member{}, false
}

// InsertAt returns where a new member goes in the object scanned as ms whose
// '{' is at open, and whether it needs a leading comma: right after the last
// value, so that whitespace before '}' stays where it was.
func InsertAt(ms []Member, open int) (pos int, comma bool) {
	if len(ms) == 0 {
		return open + 1, false
	}
	return ms[len(ms)-1].VE, true
}

// SkipSpace returns the index of the first non-whitespace byte at or after i.
func SkipSpace(data []byte, i int) int {
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

// SkipString returns the index just after the string token whose opening
// quote is at data[i].
func SkipString(data []byte, i int) int {
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

// structural marks the bytes SkipValue must look at inside containers.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// SkipValue returns the index just after the value that starts at data[i].
// data must be valid JSON; nesting depth costs no stack.
func SkipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return SkipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			c := data[i]
			if !structural[c] {
				continue
			}
			switch c {
			case '"':
				i = SkipString(data, i) - 1
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

// Edit replaces data[start:end] with pre+val+post (an insertion when
// start == end).
type Edit struct {
	Start, End     int
	Pre, Val, Post string
}

// Splice applies edits, which must not overlap, to data in one new buffer.
func Splice(data []byte, edits []Edit) []byte {
	slices.SortFunc(edits, func(a, b Edit) int { return a.Start - b.Start })
	n := len(data)
	for _, e := range edits {
		n += len(e.Pre) + len(e.Val) + len(e.Post) - (e.End - e.Start)
	}
	out := make([]byte, 0, n)
	last := 0
	for _, e := range edits {
		out = append(out, data[last:e.Start]...)
		out = append(out, e.Pre...)
		out = append(out, e.Val...)
		out = append(out, e.Post...)
		last = e.End
	}
	return append(out, data[last:]...)
}
