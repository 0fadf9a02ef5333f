// Package sse reads and writes text/event-stream (server-sent events, WHATWG
// HTML §9.2): the one SSE reader and writer of taskgate's HTTP side.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
)

// ErrEventTooLarge is Reader.Next's error for an event over its size limit.
var ErrEventTooLarge = errors.New("SSE event exceeds the size limit")

// Event is one server-sent event as read from a stream. Raw holds the
// event's bytes exactly as received (including comment lines and the blank
// line that ends it), so that untouched events can be forwarded verbatim.
type Event struct {
	Raw   []byte
	ID    []byte
	HasID bool // an id field was present (ID may still be empty)
	Name  []byte
	Data  []byte // the data lines joined with LF
	Retry int    // ms; -1 when absent
}

// Reader splits a text/event-stream into events (WHATWG HTML §9.2.6).
// Lines end with CRLF, LF or a lone CR. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	max int // max bytes per event; 0 = unlimited
	ev  Event

	// pending is the unread rest of the last ReadSlice (it may hold more
	// CR-terminated lines) and pendErr the error that came with it.
	pending []byte
	pendErr error
	// owned: pending lies in a buffer gathered for a long line, which
	// the Reader never writes again (not in br's buffer).
	owned bool
	// skipRaw: Next leaves Event.Raw empty (SkipRaw); size counts the
	// event's bytes instead.
	skipRaw bool
	size    int
}

// DefaultBufSize is NewReader's read buffer.
const DefaultBufSize = 16 << 10

// NewReader returns a Reader of r with a DefaultBufSize read buffer; max
// bounds the bytes of one event (0: unlimited).
func NewReader(r io.Reader, max int) *Reader {
	return NewReaderSize(r, DefaultBufSize, max)
}

// NewReaderSize is NewReader with a read buffer of size bytes (lines longer
// than the buffer are still read whole), for readers kept in large numbers.
func NewReaderSize(r io.Reader, size, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, size), max: max}
}

// SkipRaw makes Next leave Event.Raw empty, for a reader that uses only
// the event's fields: it saves a copy of every event (of a result of
// megabytes, for one). Call it before the first Next.
func (r *Reader) SkipRaw() { r.skipRaw = true }

// readLine returns the next line with its line end. At the end of the
// stream it returns what is left (an unterminated line) with the error; a
// nil error means the line is complete. The line is valid until the next
// call.
func (r *Reader) readLine() ([]byte, error) {
	if len(r.pending) == 0 {
		if r.pendErr != nil {
			return nil, r.pendErr
		}
		line, err := r.br.ReadSlice('\n')
		r.owned = false
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole, in a buffer of its own.
			buf := make([]byte, 0, 4*len(line))
			buf = append(buf, line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if r.max > 0 && len(buf)+r.size > r.max {
					return nil, ErrEventTooLarge
				}
				line, err = r.br.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line, r.owned = buf, true
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

// Next returns the next event. The returned event and its slices are valid
// until the following call. At the end of the stream it returns io.EOF; a
// partial event at the end of the stream is returned with io.ErrUnexpectedEOF.
func (r *Reader) Next() (*Event, error) {
	ev := &r.ev
	ev.Raw, ev.ID, ev.Name, ev.Data = ev.Raw[:0], ev.ID[:0], ev.Name[:0], ev.Data[:0]
	ev.HasID, ev.Retry = false, -1
	r.size = 0
	dataLines := 0
	for {
		line, err := r.readLine()
		if len(line) > 0 {
			r.size += len(line)
			if !r.skipRaw {
				ev.Raw = append(ev.Raw, line...)
			}
			if r.max > 0 && r.size > r.max {
				return nil, ErrEventTooLarge
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if r.size == 0 {
					return nil, io.EOF
				}
				return ev, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		content := bytes.TrimSuffix(line, []byte("\n"))
		content = bytes.TrimSuffix(content, []byte("\r"))
		if len(content) == 0 {
			if r.size == len(line) {
				// Stray blank line before any field: keep reading.
				ev.Raw = ev.Raw[:0]
				r.size = 0
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
			switch {
			case dataLines == 0 && r.owned:
				// A long line gathered in a buffer of its own: the data
				// is a view of it, not a copy (capped, so that appending
				// a further line copies rather than overwrite the rest).
				ev.Data = value[:len(value):len(value)]
			case dataLines > 0:
				ev.Data = append(ev.Data, '\n')
				fallthrough
			default:
				ev.Data = append(ev.Data, value...)
			}
			dataLines++
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID = append(ev.ID[:0], value...)
				ev.HasID = true
			}
		case "event":
			ev.Name = append(ev.Name[:0], value...)
		case "retry":
			if n, ok := atoiDigits(value); ok {
				ev.Retry = n
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

// Append appends one event with an optional id and the given data
// (split into data lines at line ends: CRLF, LF or CR, as a reader splits
// them; in JSON these are only whitespace).
func Append(dst []byte, id string, data []byte) []byte {
	// One allocation for the usual event (a JSON message has no line end
	// unless it is pretty-printed).
	dst = slices.Grow(dst, len(id)+len(data)+16)
	if id != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, id...)
		dst = append(dst, '\n')
	}
	// The next CR and LF in data, each found once with IndexByte (much
	// faster on megabytes than IndexAny) and looked for again only once
	// passed: -1 none left.
	cr, lf := bytes.IndexByte(data, '\r'), bytes.IndexByte(data, '\n')
	for off := 0; ; {
		if cr >= 0 && cr < off {
			if cr = bytes.IndexByte(data[off:], '\r'); cr >= 0 {
				cr += off
			}
		}
		if lf >= 0 && lf < off {
			if lf = bytes.IndexByte(data[off:], '\n'); lf >= 0 {
				lf += off
			}
		}
		i := lf
		if cr >= 0 && (i < 0 || cr < i) {
			i = cr
		}
		dst = append(dst, "data: "...)
		if i < 0 {
			dst = append(dst, data[off:]...)
			break
		}
		dst = append(dst, data[off:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		off = i + 1
	}
	return append(dst, '\n', '\n')
}

// AppendRewritten re-emits ev with new data, keeping its id, event name
// and retry fields.
func AppendRewritten(dst []byte, ev *Event, data []byte) []byte {
	if len(ev.Name) > 0 {
		dst = append(dst, "event: "...)
		dst = append(dst, ev.Name...)
		dst = append(dst, '\n')
	}
	if ev.Retry >= 0 {
		dst = append(dst, "retry: "...)
		dst = strconv.AppendInt(dst, int64(ev.Retry), 10)
		dst = append(dst, '\n')
	}
	id := ""
	if ev.HasID {
		id = string(ev.ID)
	}
	return Append(dst, id, data)
}
