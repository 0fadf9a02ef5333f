package proxy

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

// envelope is the part of a JSON-RPC message the proxy routes on. Byte slices
// alias the parsed buffer: copy them before the buffer dies (fasthttp reuses a request's buffers
// once its handler returns).
//
// kind says what the message is (jsonx.Classify: request, notification,
// response, none; batch for an array); routing tests the kind, never the
// members that make it. spec is the method's entry in the method table
// (methods.go), nil for a method taskgate does not know or no method.
type envelope struct {
	kind      jsonx.Kind
	id        []byte // raw JSON of "id"; nil when absent
	method    string
	spec      *methodSpec
	params    []byte // raw JSON of "params"; nil when absent
	hasResult bool
	hasError  bool
	batch     []envelope // elements when the message is a batch
}

// isRequest reports whether the message is a request (method and id).
func (e *envelope) isRequest() bool { return e.kind == jsonx.KindRequest }

// isResponse reports whether the message is a response (no method; a
// result or an error).
func (e *envelope) isResponse() bool { return e.kind == jsonx.KindResponse }

// hasMethod reports whether the message is a request or a notification.
func (e *envelope) hasMethod() bool {
	return e.kind == jsonx.KindRequest || e.kind == jsonx.KindNotification
}

// envelope members, matched exactly; a case-insensitive match of one of them
// that is not exact is refused (encoding/json would accept it, and a member spelt "Method" could then
// slip past the policy while the upstream reads "method").
var envelopeMembers = [...]string{"jsonrpc", "id", "method", "params", "result", "error"}

// parseEnvelope parses one JSON-RPC message or batch strictly: exact-case
// member names, no duplicates, id kept raw, params not decoded. The whole
// body must be valid JSON.
func parseEnvelope(b []byte) (envelope, error) {
	s := jsonx.Scanner{B: b}
	s.Space()
	if s.I >= len(b) {
		return envelope{}, jsonx.ErrSyntax
	}
	var env envelope
	var err error
	switch b[s.I] {
	case '{':
		env, err = parseMessage(&s)
	case '[':
		env, err = parseBatch(&s)
	default:
		if _, verr := s.Value(); verr != nil {
			return envelope{}, verr
		}
		err = jsonx.ErrNotObject
	}
	if err != nil {
		if !errors.Is(err, jsonx.ErrSyntax) && !errors.Is(err, jsonx.ErrTooDeep) {
			// A refused message may stop reading early (a batch's bad
			// element, a non-object value): syntax errors in the rest
			// still win, so malformed JSON is always a parse error.
			if verr := jsonx.Valid(b); verr != nil {
				return envelope{}, verr
			}
		}
		return envelope{}, err
	}
	s.Space()
	if s.I != len(b) {
		return envelope{}, jsonx.ErrTrailing
	}
	return env, nil
}

func parseBatch(s *jsonx.Scanner) (envelope, error) {
	var env envelope
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
			env.batch = append(env.batch, el)
			env.kind = jsonx.KindBatch
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

func parseMessage(s *jsonx.Scanner) (envelope, error) {
	var env envelope
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
			if semantic == nil && !validID(val) {
				semantic = errBadID
			}
			env.id = val
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
			env.spec = lookupMethod(m)
			if env.spec != nil {
				env.method = env.spec.name // no copy for the methods taskgate knows
			} else {
				env.method = string(m)
			}
		case "params":
			env.params = val
		case "result":
			env.hasResult = true
		case "error":
			env.hasError = true
		}
		return nil
	})
	if err != nil {
		return envelope{}, err
	}
	if semantic != nil {
		return envelope{}, semantic
	}
	if !seen[0] {
		return envelope{}, errBadVersion
	}
	if seen[2] && string(env.id) == "null" {
		// A request's id is never null (L-09); null only answers a
		// request whose id could not be read.
		return envelope{}, errBadID
	}
	env.kind = jsonx.Classify(env.method, env.id != nil, env.hasResult || env.hasError)
	return env, nil
}

// validID accepts a string, an integer or null (null only appears in error
// responses to unparseable requests; parseMessage refuses it in requests).
func validID(v []byte) bool {
	switch {
	case v[0] == '"', string(v) == "null":
		return true
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		return !bytes.ContainsAny(v, ".eE")
	}
	return false
}
