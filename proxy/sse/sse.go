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
	"sync"
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
	src *source // br's reader
	max int     // max bytes per event; 0 = unlimited
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
	src := &source{rd: r}
	return &Reader{br: bufio.NewReaderSize(src, size), src: src, max: max}
}

// source is a Reader's underlying reader with bytes read ahead of br put
// back in front (extra): a long line is read straight into its own buffer
// in large reads, and what came after its end goes back.
type source struct {
	extra []byte
	rd    io.Reader
}

func (s *source) Read(p []byte) (int, error) {
	if len(s.extra) > 0 {
		n := copy(p, s.extra)
		s.extra = s.extra[n:]
		return n, nil
	}
	return s.rd.Read(p)
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
			line, err = r.gather(line)
			if err != nil && len(line) == 0 {
				return nil, err
			}
			r.owned = true
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

// gather reads the rest of a line longer than br's buffer, whose start is
// head, and returns the whole line in a buffer of its own. ReadSlice has
// emptied br, so br.Read reads straight into pieces of gatherPiece bytes
// (pooled, so their memory is warm and never cleared again), in reads as
// large as a piece's free room: a result of megabytes arrives in a few
// dozen reads rather than one per buffer's worth, and is copied once into
// a buffer of its exact size, where growing one buffer by doubling would
// clear and copy twice its size. The bytes read past the line's end go
// back to src. The error is ErrEventTooLarge, or the read error that ended
// an unterminated line.
func (r *Reader) gather(head []byte) ([]byte, error) {
	var pieces []*[]byte
	defer func() {
		for _, p := range pieces {
			gatherPieces.Put(p)
		}
	}()
	n := len(head) // bytes of the line so far
	var piece []byte
	var err error
	for {
		if r.max > 0 && n+r.size > r.max {
			return nil, ErrEventTooLarge
		}
		if cap(piece)-len(piece) < max(16<<10, r.br.Size()) {
			// Room for at least br's size: br reads straight into it
			// (and holds nothing buffered after, so extra comes next).
			p := gatherPieces.Get().(*[]byte)
			pieces = append(pieces, p)
			piece = (*p)[:0]
		}
		var m int
		m, err = r.br.Read(piece[len(piece):cap(piece)])
		read := piece[len(piece) : len(piece)+m]
		i := bytes.IndexByte(read, '\n')
		if i >= 0 {
			r.src.extra = append([]byte(nil), read[i+1:]...) // the piece goes back to the pool
			read, err = read[:i+1], nil
		}
		piece = piece[:len(piece)+len(read)]
		*pieces[len(pieces)-1] = piece
		n += len(read)
		if i >= 0 || err != nil {
			break
		}
	}
	line := make([]byte, 0, n)
	line = append(line, head...)
	for _, p := range pieces {
		line = append(line, *p...)
	}
	return line, err
}

// gatherPiece is the size of the pieces gather reads a long line into.
const gatherPiece = 1 << 20

var gatherPieces = sync.Pool{New: func() any {
	b := make([]byte, 0, gatherPiece)
	return &b
}}

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
	eachLine(data, func(line []byte) {
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
	})
	return append(dst, '\n')
}

// Write writes the event Append would append to w, without building it
// first: for data of megabytes, one copy fewer. It returns the first
// error of w.
func Write(w *bufio.Writer, id string, data []byte) error {
	if id != "" {
		_, _ = w.WriteString("id: ")
		_, _ = w.WriteString(id)
		_ = w.WriteByte('\n')
	}
	eachLine(data, func(line []byte) {
		_, _ = w.WriteString("data: ")
		_, _ = w.Write(line) // a large line goes straight to w's writer
		_ = w.WriteByte('\n')
	})
	_ = w.WriteByte('\n')
	_, err := w.Write(nil) // the error a write met, if any
	return err
}

// eachLine calls fn with each line of data split at line ends (CRLF, LF
// or CR), at least once.
func eachLine(data []byte, fn func(line []byte)) {
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
		if i < 0 {
			fn(data[off:])
			return
		}
		fn(data[off:i])
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		off = i + 1
	}
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
