package jsonx

import (
	"errors"
	"strings"
)

var (
	ErrNotObject = errors.New("a JSON-RPC message must be a JSON object")
	ErrDupMember = errors.New("duplicate member")
	ErrOddMember = errors.New("member name differs from a JSON-RPC member only in case")
)

// Members returns the raw values of the named members of the JSON object
// obj; values for absent names are nil. obj is validated as it is read
// (a syntax error is ErrSyntax or ErrTooDeep, a non-object ErrNotObject).
//
// The wanted-names rule: names match exactly (after unescaping). A wanted
// name that occurs twice is ErrDupMember; a member whose name equals a
// wanted name only under Unicode case folding ("Method", "param\u017f") is
// ErrOddMember. Members not asked for are not checked. The rule exists
// because encoding/json, which many upstreams use, matches member names
// case-insensitively and lets the last duplicate win: without it a member
// the proxy ignores could be the one the upstream reads. A syntax error
// found later in obj wins over either.
func Members(obj []byte, names ...string) ([][]byte, error) {
	s := Scanner{B: obj}
	s.Space()
	if s.I >= len(obj) || obj[s.I] != '{' {
		return nil, ErrNotObject
	}
	out := make([][]byte, len(names))
	var semantic error
	err := s.Object(func(key []byte, escaped bool, val []byte) error {
		name, ok := UnquoteBytes(key, escaped)
		if !ok {
			return ErrSyntax
		}
		for i, n := range names {
			if string(name) == n {
				if out[i] != nil && semantic == nil {
					semantic = ErrDupMember
				}
				out[i] = val
				return nil
			}
			if semantic == nil && FoldsTo(name, n) {
				semantic = ErrOddMember
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, semantic
}

// FoldsTo reports whether name equals m under Unicode case folding (as
// encoding/json struct decoding matches keys). A rune folding to an ASCII
// letter takes at most 3 bytes (K, the Kelvin sign), so longer names are
// skipped without converting them.
func FoldsTo(name []byte, m string) bool {
	return len(name) <= 3*len(m) && strings.EqualFold(string(name), m)
}

// SetMember returns a copy of the JSON object obj with member key set to
// val: the first member of exactly that name is replaced in place and
// later ones of that name are dropped; without one, the member is appended.
// obj must be a valid object; key must not need escaping.
func SetMember(obj []byte, key string, val []byte) ([]byte, error) {
	return editObject(obj, key, val, false)
}

// DeleteMember returns a copy of obj without any member named exactly key.
func DeleteMember(obj []byte, key string) ([]byte, error) {
	return editObject(obj, key, nil, true)
}

func editObject(obj []byte, key string, val []byte, del bool) ([]byte, error) {
	s := Scanner{B: obj}
	s.Space()
	if s.I >= len(obj) || obj[s.I] != '{' {
		return nil, ErrNotObject
	}
	out := make([]byte, 0, len(obj)+len(key)+len(val)+4)
	out = append(out, '{')
	emit := func(k, v []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, k...)
		out = append(out, '"', ':')
		out = append(out, v...)
	}
	replaced := false
	err := s.Object(func(k []byte, escaped bool, v []byte) error {
		name, ok := UnquoteBytes(k, escaped)
		if !ok {
			return ErrSyntax
		}
		if string(name) == key {
			if del || replaced {
				return nil
			}
			replaced = true
			v = val
		}
		emit(k, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !replaced && !del {
		emit([]byte(key), val)
	}
	return append(out, '}'), nil
}
