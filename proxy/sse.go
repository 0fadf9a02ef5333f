package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

var errEventTooLarge = errors.New("SSE event exceeds the size limit")

// sseEvent is one server-sent event as read from an upstream. raw holds the
// event's bytes exactly as received (including comment lines and the blank
// line that ends it), so that untouched events can be forwarded verbatim.
type sseEvent struct {
	raw   []byte
	id    []byte
	hasID bool
	name  []byte
	data  []byte
	retry int // ms; -1 when absent
}

// sseReader splits a text/event-stream into events (WHATWG HTML §9.2.6).
// Lines end with CRLF, LF or a lone CR. It is not safe for concurrent use.
type sseReader struct {
	br  *bufio.Reader
	max int // max bytes per event; 0 = unlimited
	ev  sseEvent

	// pending is the unread rest of the last ReadSlice (it may hold more
	// CR-terminated lines) and pendErr the error that came with it.
	pending []byte
	pendErr error
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 16<<10), max: max}
}

// readLine returns the next line with its line end. At the end of the
// stream it returns what is left (an unterminated line) with the error; a
// nil error means the line is complete. The line is valid until the next
// call.
func (r *sseReader) readLine() ([]byte, error) {
	if len(r.pending) == 0 {
		if r.pendErr != nil {
			return nil, r.pendErr
		}
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if r.max > 0 && len(buf)+len(r.ev.raw) > r.max {
					return nil, errEventTooLarge
				}
				line, err = r.br.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		r.pending, r.pendErr = line, err
		if len(line) == 0 {
			return nil, err
		}
	}
	p := r.pending
	if i := bytes.IndexByte(p, '\r'); i >= 0 && (i+1 == len(p) || p[i+1] != '\n') {
		// A lone CR ends the line (also at the end of the stream).
		r.pending = p[i+1:]
		return p[:i+1], nil
	}
	r.pending = nil
	if p[len(p)-1] == '\n' {
		return p, nil
	}
	return p, r.pendErr
}

// next returns the next event. The returned event and its slices are valid
// until the following call. At the end of the stream it returns io.EOF; a
// partial event at the end of the stream is returned with io.ErrUnexpectedEOF.
func (r *sseReader) next() (*sseEvent, error) {
	ev := &r.ev
	ev.raw, ev.id, ev.name, ev.data = ev.raw[:0], ev.id[:0], ev.name[:0], ev.data[:0]
	ev.hasID, ev.retry = false, -1
	dataLines := 0
	for {
		line, err := r.readLine()
		if len(line) > 0 {
			ev.raw = append(ev.raw, line...)
			if r.max > 0 && len(ev.raw) > r.max {
				return nil, errEventTooLarge
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(ev.raw) == 0 {
					return nil, io.EOF
				}
				return ev, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		content := bytes.TrimSuffix(line, []byte("\n"))
		content = bytes.TrimSuffix(content, []byte("\r"))
		if len(content) == 0 {
			if len(ev.raw) == len(line) {
				// Stray blank line before any field: keep reading.
				ev.raw = ev.raw[:0]
				continue
			}
			return ev, nil
		}
		if content[0] == ':' {
			continue // comment
		}
		field, value := content, []byte(nil)
		if i := bytes.IndexByte(content, ':'); i >= 0 {
			field, value = content[:i], content[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if dataLines > 0 {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, value...)
			dataLines++
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.id = append(ev.id[:0], value...)
				ev.hasID = true
			}
		case "event":
			ev.name = append(ev.name[:0], value...)
		case "retry":
			if n, ok := atoiDigits(value); ok {
				ev.retry = n
			}
		}
	}
}

// atoiDigits parses a retry value: ASCII digits only (WHATWG), no sign.
func atoiDigits(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(string(b))
	return n, err == nil
}

// appendSSE appends one event with an optional id and the given data
// (split into data lines at line ends: CRLF, LF or CR, as a reader splits
// them; in JSON these are only whitespace).
func appendSSE(dst []byte, id string, data []byte) []byte {
	if id != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, id...)
		dst = append(dst, '\n')
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		dst = append(dst, "data: "...)
		if i < 0 {
			dst = append(dst, data...)
			break
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	return append(dst, '\n', '\n')
}

// appendSSERewritten re-emits ev with new data, keeping its id, event name
// and retry fields.
func appendSSERewritten(dst []byte, ev *sseEvent, data []byte) []byte {
	if len(ev.name) > 0 {
		dst = append(dst, "event: "...)
		dst = append(dst, ev.name...)
		dst = append(dst, '\n')
	}
	if ev.retry >= 0 {
		dst = append(dst, "retry: "...)
		dst = strconv.AppendInt(dst, int64(ev.retry), 10)
		dst = append(dst, '\n')
	}
	id := ""
	if ev.hasID {
		id = string(ev.id)
	}
	return appendSSE(dst, id, data)
}
