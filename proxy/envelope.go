package proxy

import (
	"bytes"
	"errors"
	"strings"
)

// JSON-RPC methods taskgate looks at. Everything else passes through.
const (
	methodInitialize  = "initialize"
	methodToolsList   = "tools/list"
	methodToolsCall   = "tools/call"
	methodTasksGet    = "tasks/get"
	methodTasksResult = "tasks/result"
	methodTasksList   = "tasks/list"
	methodTasksCancel = "tasks/cancel"
	methodPing        = "ping"

	notificationCancelled = "notifications/cancelled"
)

// Envelope errors. A syntax error is a JSON-RPC parse error (-32700); the
// others make the message an invalid request (-32600).
var (
	errNotObject   = errors.New("a JSON-RPC message must be a JSON object")
	errDupMember   = errors.New("duplicate member")
	errOddMember   = errors.New("member name differs from a JSON-RPC member only in case")
	errBadVersion  = errors.New(`"jsonrpc" must be "2.0"`)
	errBadMethod   = errors.New(`"method" must be a string`)
	errBadID       = errors.New(`"id" must be a string or an integer`)
	errEmptyBatch  = errors.New("empty batch")
	errNestedBatch = errors.New("nested batch")
)

// envelope is the part of a JSON-RPC message the proxy routes on. Byte slices
// alias the parsed buffer: copy them before the buffer dies (fasthttp reuses a request's buffers
// once its handler returns).
type envelope struct {
	id        []byte // raw JSON of "id"; nil when absent
	method    string
	params    []byte // raw JSON of "params"; nil when absent
	hasResult bool
	hasError  bool
	batch     []envelope // elements when the message is a batch
}

// isRequest reports whether the message is a request (method and id).
func (e *envelope) isRequest() bool { return e.method != "" && e.id != nil }

// envelope members, matched exactly; a case-insensitive match of one of them
// that is not exact is refused (encoding/json would accept it, and a member spelt "Method" could then
// slip past the policy while the upstream reads "method").
var envelopeMembers = [...]string{"jsonrpc", "id", "method", "params", "result", "error"}

// parseEnvelope parses one JSON-RPC message or batch strictly: exact-case
// member names, no duplicates, id kept raw, params not decoded. The whole
// body must be valid JSON.
func parseEnvelope(b []byte) (envelope, error) {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) {
		return envelope{}, errSyntax
	}
	var env envelope
	var err error
	switch b[s.i] {
	case '{':
		env, err = parseMessage(&s)
	case '[':
		env, err = parseBatch(&s)
	default:
		if _, verr := s.value(); verr != nil {
			return envelope{}, verr
		}
		err = errNotObject
	}
	if err != nil {
		if !errors.Is(err, errSyntax) && !errors.Is(err, errTooDeep) {
			// A refused message may stop reading early (a batch's bad
			// element, a non-object value): syntax errors in the rest
			// still win, so malformed JSON is always a parse error.
			if verr := validJSON(b); verr != nil {
				return envelope{}, verr
			}
		}
		return envelope{}, err
	}
	s.ws()
	if s.i != len(b) {
		return envelope{}, errTrailing
	}
	return env, nil
}

// validJSON reports the syntax error of b as one JSON text, or nil.
func validJSON(b []byte) error {
	s := scanner{b: b}
	if _, err := s.value(); err != nil {
		return err
	}
	s.ws()
	if s.i != len(b) {
		return errTrailing
	}
	return nil
}

func parseBatch(s *scanner) (envelope, error) {
	var env envelope
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return env, errEmptyBatch
	}
	for {
		s.ws()
		if s.i >= len(s.b) {
			return env, errSyntax
		}
		switch s.b[s.i] {
		case '{':
			el, err := parseMessage(s)
			if err != nil {
				return env, err
			}
			env.batch = append(env.batch, el)
		case '[':
			if _, err := s.value(); err != nil {
				return env, err
			}
			return env, errNestedBatch
		default:
			if _, err := s.value(); err != nil {
				return env, err
			}
			return env, errNotObject
		}
		s.ws()
		if s.i >= len(s.b) {
			return env, errSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return env, nil
		default:
			return env, errSyntax
		}
	}
}

func parseMessage(s *scanner) (envelope, error) {
	var env envelope
	var seen [len(envelopeMembers)]bool
	var semantic error // first non-syntax error; syntax errors win
	err := s.object(func(key []byte, escaped bool, val []byte) error {
		name, ok := unquoteBytes(key, escaped)
		if !ok {
			return errSyntax
		}
		idx := -1
		for i, m := range envelopeMembers {
			if string(name) == m {
				idx = i
				break
			}
			if semantic == nil && foldsTo(name, m) {
				semantic = errOddMember
			}
		}
		if idx < 0 {
			return nil
		}
		if seen[idx] {
			if semantic == nil {
				semantic = errDupMember
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
			ss := scanner{b: val}
			content, esc, _ := ss.str()
			m, ok := unquoteBytes(content, esc)
			if !ok {
				return errSyntax
			}
			env.method = internMethod(m)
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

// foldsTo reports whether name equals m under Unicode case folding (as
// encoding/json struct decoding matches keys). A rune folding to an ASCII
// letter takes at most 3 bytes (K, the Kelvin sign), so longer names are
// skipped without converting them.
func foldsTo(name []byte, m string) bool {
	return len(name) <= 3*len(m) && strings.EqualFold(string(name), m)
}

// internMethod returns a constant for the methods the proxy routes on, so
// that the common case allocates nothing.
func internMethod(m []byte) string {
	switch string(m) {
	case methodInitialize:
		return methodInitialize
	case methodToolsList:
		return methodToolsList
	case methodToolsCall:
		return methodToolsCall
	case methodTasksGet:
		return methodTasksGet
	case methodTasksResult:
		return methodTasksResult
	case methodTasksList:
		return methodTasksList
	case methodTasksCancel:
		return methodTasksCancel
	case methodPing:
		return methodPing
	}
	return string(m)
}

// members returns the raw values of the named members of a JSON object,
// exactly matched; a duplicate or a case-variant of a wanted name is an
// error. Values for absent names are nil.
func members(obj []byte, names ...string) ([][]byte, error) {
	s := scanner{b: obj}
	s.ws()
	if s.i >= len(obj) || obj[s.i] != '{' {
		return nil, errNotObject
	}
	out := make([][]byte, len(names))
	var semantic error
	err := s.object(func(key []byte, escaped bool, val []byte) error {
		name, ok := unquoteBytes(key, escaped)
		if !ok {
			return errSyntax
		}
		for i, n := range names {
			if string(name) == n {
				if out[i] != nil && semantic == nil {
					semantic = errDupMember
				}
				out[i] = val
				return nil
			}
			if semantic == nil && foldsTo(name, n) {
				semantic = errOddMember
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, semantic
}

// setMember returns a copy of the JSON object obj with member key set to
// val (replacing an existing member of that exact name, else appended).
// obj must be a valid object; key must not need escaping.
func setMember(obj []byte, key string, val []byte) ([]byte, error) {
	return editObject(obj, key, val, false)
}

// deleteMember returns a copy of obj without member key.
func deleteMember(obj []byte, key string) ([]byte, error) {
	return editObject(obj, key, nil, true)
}

func editObject(obj []byte, key string, val []byte, del bool) ([]byte, error) {
	s := scanner{b: obj}
	s.ws()
	if s.i >= len(obj) || obj[s.i] != '{' {
		return nil, errNotObject
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
	err := s.object(func(k []byte, escaped bool, v []byte) error {
		name, ok := unquoteBytes(k, escaped)
		if !ok {
			return errSyntax
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
