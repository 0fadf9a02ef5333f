package wire

import (
	"bytes"
	"errors"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// Envelope errors. A syntax error is a JSON-RPC parse error (-32700); the
// others make the message an invalid request (-32600).
// Syntax errors (jsonx.ErrSyntax, ErrTooDeep, ErrTrailing) and the
// member-rule errors (jsonx.ErrNotObject, ErrDupMember, ErrOddMember) come
// from jsonx.
var (
	errBadVersion  = errors.New(`"jsonrpc" must be "2.0"`)
	errBadMethod   = errors.New(`"method" must be a string`)
	errBadID       = errors.New(`"id" must be a string or an integer`)
	errEmptyBatch  = errors.New("empty batch")
	errNestedBatch = errors.New("nested batch")
)

// Envelope is the part of a JSON-RPC message the proxy routes on. Byte slices
// alias the parsed buffer: copy them before the buffer dies (fasthttp reuses a request's buffers
// once its handler returns).
//
// Kind says what the message is (jsonx.Classify: request, notification,
// response, none; batch for an array); routing tests the kind, never the
// members that make it. Spec is the method's entry in the method table
// (methods.go), nil for a method taskgate does not know or no method.
type Envelope struct {
	Kind      jsonx.Kind
	ID        []byte // raw JSON of "id"; nil when absent
	Method    string
	Spec      *Spec
	Params    []byte // raw JSON of "params"; nil when absent
	HasResult bool
	HasError  bool
	Batch     []Envelope // elements when the message is a batch
}

// IsRequest reports whether the message is a request (method and id).
func (e *Envelope) IsRequest() bool { return e.Kind == jsonx.KindRequest }

// IsResponse reports whether the message is a response (no method; a
// result or an error).
func (e *Envelope) IsResponse() bool { return e.Kind == jsonx.KindResponse }

// HasMethod reports whether the message is a request or a notification.
func (e *Envelope) HasMethod() bool {
	return e.Kind == jsonx.KindRequest || e.Kind == jsonx.KindNotification
}

// envelope members, matched exactly; a case-insensitive match of one of them
// that is not exact is refused (encoding/json would accept it, and a member spelt "Method" could then
// slip past the policy while the upstream reads "method").
var envelopeMembers = [...]string{"jsonrpc", "id", "method", "params", "result", "error"}

// ParseEnvelope parses one JSON-RPC message or batch strictly: exact-case
// member names, no duplicates, id kept raw, params not decoded. The whole
// body must be valid JSON.
func ParseEnvelope(b []byte) (Envelope, error) {
	s := jsonx.Scanner{B: b}
	s.Space()
	if s.I >= len(b) {
		return Envelope{}, jsonx.ErrSyntax
	}
	var env Envelope
	var err error
	switch b[s.I] {
	case '{':
		env, err = parseMessage(&s)
	case '[':
		env, err = parseBatch(&s)
	default:
		if _, verr := s.Value(); verr != nil {
			return Envelope{}, verr
		}
		err = jsonx.ErrNotObject
	}
	if err != nil {
		if !errors.Is(err, jsonx.ErrSyntax) && !errors.Is(err, jsonx.ErrTooDeep) {
			// A refused message may stop reading early (a batch's bad
			// element, a non-object value): syntax errors in the rest
			// still win, so malformed JSON is always a parse error.
			if verr := jsonx.Valid(b); verr != nil {
				return Envelope{}, verr
			}
		}
		return Envelope{}, err
	}
	s.Space()
	if s.I != len(b) {
		return Envelope{}, jsonx.ErrTrailing
	}
	return env, nil
}

func parseBatch(s *jsonx.Scanner) (Envelope, error) {
	var env Envelope
	s.I++ // [
	s.Space()
	if s.I < len(s.B) && s.B[s.I] == ']' {
		s.I++
		return env, errEmptyBatch
	}
	for {
		s.Space()
		if s.I >= len(s.B) {
			return env, jsonx.ErrSyntax
		}
		switch s.B[s.I] {
		case '{':
			el, err := parseMessage(s)
			if err != nil {
				return env, err
			}
			env.Batch = append(env.Batch, el)
			env.Kind = jsonx.KindBatch
		case '[':
			if _, err := s.Value(); err != nil {
				return env, err
			}
			return env, errNestedBatch
		default:
			if _, err := s.Value(); err != nil {
				return env, err
			}
			return env, jsonx.ErrNotObject
		}
		s.Space()
		if s.I >= len(s.B) {
			return env, jsonx.ErrSyntax
		}
		switch s.B[s.I] {
		case ',':
			s.I++
		case ']':
			s.I++
			return env, nil
		default:
			return env, jsonx.ErrSyntax
		}
	}
}

func parseMessage(s *jsonx.Scanner) (Envelope, error) {
	var env Envelope
	var seen [len(envelopeMembers)]bool
	var semantic error // first non-syntax error; syntax errors win
	err := s.Object(func(key []byte, escaped bool, val []byte) error {
		name, ok := jsonx.UnquoteBytes(key, escaped)
		if !ok {
			return jsonx.ErrSyntax
		}
		idx := -1
		for i, m := range envelopeMembers {
			if string(name) == m {
				idx = i
				break
			}
			if semantic == nil && jsonx.FoldsTo(name, m) {
				semantic = jsonx.ErrOddMember
			}
		}
		if idx < 0 {
			return nil
		}
		if seen[idx] {
			if semantic == nil {
				semantic = jsonx.ErrDupMember
			}
			return nil
		}
		seen[idx] = true
		switch envelopeMembers[idx] {
		case "jsonrpc":
			if string(val) != `"2.0"` && semantic == nil {
				semantic = errBadVersion
			}
		case "id":
			if semantic == nil && !ValidID(val) {
				semantic = errBadID
			}
			env.ID = val
		case "method":
			if val[0] != '"' {
				if semantic == nil {
					semantic = errBadMethod
				}
				return nil
			}
			ss := jsonx.Scanner{B: val}
			content, esc, _ := ss.Str()
			m, ok := jsonx.UnquoteBytes(content, esc)
			if !ok {
				return jsonx.ErrSyntax
			}
			env.Spec = Lookup(m)
			if env.Spec != nil {
				env.Method = env.Spec.Name // no copy for the methods taskgate knows
			} else {
				env.Method = string(m)
			}
		case "params":
			env.Params = val
		case "result":
			env.HasResult = true
		case "error":
			env.HasError = true
		}
		return nil
	})
	if err != nil {
		return Envelope{}, err
	}
	if semantic != nil {
		return Envelope{}, semantic
	}
	if !seen[0] {
		return Envelope{}, errBadVersion
	}
	if seen[2] && string(env.ID) == "null" {
		// A request's id is never null (L-09); null only answers a
		// request whose id could not be read.
		return Envelope{}, errBadID
	}
	env.Kind = jsonx.Classify(env.Method, env.ID != nil, env.HasResult || env.HasError)
	return env, nil
}

// ValidID accepts a string, an integer or null (null only appears in error
// responses to unparseable requests; parseMessage refuses it in requests).
func ValidID(v []byte) bool {
	switch {
	case v[0] == '"', string(v) == "null":
		return true
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		return !bytes.ContainsAny(v, ".eE")
	}
	return false
}
