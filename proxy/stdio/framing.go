package stdio

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// Framing of the stdio transport: each JSON-RPC message is one line of
// UTF-8 JSON ended by '\n'; messages never contain a raw newline (JSON
// strings cannot, and whitespace newlines are removed before writing).

// errLineTooLong is returned by lineReader.next for a line over its limit.
var errLineTooLong = errors.New("stdio: line exceeds the size limit")

// prefixMax is how much of an over-long line lineReader keeps, so that the
// caller can still find the id of the response it was.
const prefixMax = 4 << 10

// lineReader reads newline-delimited lines of at most max bytes from a
// child's output. It is used by one goroutine.
type lineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its "\n" (or "\r\n"). The slice is
// valid until the next call. A line longer than max is read to its end and
// dropped: next returns its first prefixMax bytes with errLineTooLong and
// the following call goes on with the next line. A last line without a
// newline before EOF is returned as a line; then next returns io.EOF.
func (r *lineReader) next() ([]byte, error) {
	r.buf = r.buf[:0]
	n, tooLong := 0, false
	for {
		chunk, err := r.br.ReadSlice('\n')
		data := chunk
		if err == nil {
			data = chunk[:len(chunk)-1]
		}
		n += len(data)
		switch {
		case tooLong:
		case n > r.max:
			tooLong = true
			if room := prefixMax - len(r.buf); room > 0 {
				r.buf = append(r.buf, data[:min(room, len(data))]...)
			}
		default:
			r.buf = append(r.buf, data...)
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && n > 0:
			// The child ended without a final newline: its last line.
		default:
			return nil, err
		}
		if tooLong {
			return r.buf, errLineTooLong
		}
		line := r.buf
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		// A huge line once must not pin its buffer for the child's life.
		if cap(r.buf) > 1<<20 {
			out := line
			r.buf = nil
			return out, nil
		}
		return line, nil
	}
}

// message is one JSON-RPC message, classified (jsonx.Classify, as the
// HTTP side classifies its envelopes).
type message struct {
	id     json.RawMessage // raw, nil when absent or null
	method string
	params json.RawMessage
	kind   jsonx.Kind // request, notification or response (never none or batch)
	failed bool       // a response with an error
}

// isRequest reports whether m is a request (a method and an id).
func (m *message) isRequest() bool { return m.kind == jsonx.KindRequest }

// isResponse reports whether m is a response (no method; a result or an
// error).
func (m *message) isResponse() bool { return m.kind == jsonx.KindResponse }

// wireMessage is the envelope as decoded.
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

var (
	errNotJSON    = errors.New("not JSON")
	errNotMessage = errors.New("not a JSON-RPC 2.0 message")
)

// parseMessage classifies one JSON-RPC message. It validates the whole
// input as JSON.
func parseMessage(b []byte) (message, error) {
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return message{}, errNotMessage
		}
		return message{}, errNotJSON
	}
	if w.JSONRPC != "2.0" {
		return message{}, errNotMessage
	}
	m := message{method: w.Method, params: w.Params}
	if len(w.ID) > 0 && string(w.ID) != "null" {
		m.id = w.ID
	}
	m.kind = jsonx.Classify(m.method, m.id != nil, w.Result != nil || w.Error != nil)
	switch m.kind {
	case jsonx.KindNone:
		return message{}, errNotMessage
	case jsonx.KindResponse:
		m.failed = w.Error != nil
	}
	return m, nil
}

// isBatch reports whether b is a JSON array (after whitespace).
func isBatch(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}

// canonicalID is the map key of a raw JSON-RPC id, the same however it
// was encoded: "s:" and the unescaped string, or "n:" and the number's
// value. It is never written out.
func canonicalID(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return "s:" + s
		}
		return string(raw)
	}
	if f, err := strconv.ParseFloat(string(raw), 64); err == nil {
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return "n:" + strconv.FormatInt(int64(f), 10)
		}
		return "n:" + strconv.FormatFloat(f, 'g', -1, 64)
	}
	return string(raw)
}

// progressToken returns the canonical progress token a request asks for
// (params._meta.progressToken), or "".
func requestProgressToken(params json.RawMessage) string {
	if !bytes.Contains(params, []byte(`"progressToken"`)) {
		return ""
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	return canonicalID(p.Meta.ProgressToken)
}

// notificationToken returns the canonical progressToken of a
// notifications/progress, or "".
func notificationToken(params json.RawMessage) string {
	var p struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	return canonicalID(p.ProgressToken)
}

// cancelledID returns the canonical requestId of a notifications/cancelled.
func cancelledID(params json.RawMessage) string {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	return canonicalID(p.RequestID)
}

// prefixID finds the top-level "id" of a message of which only the first
// bytes are known (an over-long line), or returns "".
func prefixID(prefix []byte) string {
	d := json.NewDecoder(bytes.NewReader(prefix))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return ""
		}
		if k == "id" {
			var raw json.RawMessage
			if d.Decode(&raw) != nil {
				return ""
			}
			return canonicalID(raw)
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return "" // the prefix ends inside this value
		}
	}
	return ""
}

// oneLine returns msg with its newlines (JSON whitespace) replaced by
// spaces, so that it is one line; msg must be valid JSON, in which a raw
// newline can only be whitespace. It copies only when there is one.
func oneLine(msg []byte) []byte {
	if bytes.IndexByte(msg, '\n') < 0 {
		return msg
	}
	out := bytes.ReplaceAll(msg, []byte{'\n'}, []byte{' '})
	return out
}

// appendError appends a JSON-RPC error response for id (raw; nil is null).
func appendError(dst []byte, id json.RawMessage, code int, msg string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	if id == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, id...)
	}
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":`...)
	q, _ := json.Marshal(msg) // a string always marshals
	dst = append(dst, q...)
	return append(dst, "}}"...)
}

// JSON-RPC error codes.
const (
	codeInvalidRequest = -32600
	codeInternalError  = -32603
	// codeServerGone is the code of errors for calls whose stdio server
	// ended (implementation-defined server error range).
	codeServerGone = -32000
)
