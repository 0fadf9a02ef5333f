package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/sysconn"
)

// StreamEnd is told, once, how a streamed answer ended: "" (read to its
// end), OutcomeClientGone or OutcomeStreamCut.
type StreamEnd interface {
	End(outcome string)
}

// How a streamed pass-through answer can end early (StreamEnd.End).
const (
	// OutcomeClientGone: the client closed its connection mid-answer.
	OutcomeClientGone = "client_gone"
	// OutcomeStreamCut: the upstream closed, an idle or lifetime limit
	// cut the answer, or a write to the client failed.
	OutcomeStreamCut = "stream_cut"
)

// Relay sends rc.Request (made ready by Prepare) to the upstream on a
// pooled connection of the pass-through pool and puts the answer in
// rc.Response.
//
// An answer whose body has already arrived whole when its header is read
// is read at once and goes to the client in one write, with a
// Content-Length, instead of one write for the event and one for the end of
// the chunked body: one system call and one wake-up of the client less per
// request. Any other body is streamed: each piece the upstream sends is
// written to the client as soon as it arrives; Relay then returns the
// Relayed body stream, which the caller must give a StreamEnd before its
// handler returns. Relay never waits for more of a body than has arrived:
// a timed wait for the end of an SSE answer (SDKs write the event and the
// end of the body in two writes) cost more than it saved where it matters,
// on a busy core, where the upstream often cannot write the end within any
// short wait and the wait's timer then wakes the proxy for nothing. The
// request itself is sent by the read of the answer
// (sysconn.Conn.WriteLater), saving a system call.
//
// A request is never replayed (a tools/call that may have run must not run
// twice): an error after the request may have reached the upstream is
// returned to the caller.
func (c *Client) Relay(rc *fasthttp.RequestCtx) (*Relayed, error) {
	req := &rc.Request
	uc := c.passPool.get()
	if uc == nil {
		var err error
		if uc, err = c.dialPass(); err != nil {
			return nil, err
		}
	}
	req.URI().DisablePathNormalizing = true
	if ic, ok := uc.Conn.(*idleConn); ok {
		ic.holdWrite = true // sent by the read of the answer, which follows at once
	}
	err := req.Write(uc.bw)
	if err == nil {
		err = uc.bw.Flush()
	}
	if err != nil {
		_ = uc.Close()
		return nil, err
	}
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	resp.SkipBody = req.Header.IsHead()
	unwatch := awaitHeader(uc, rc.Conn())
	err = resp.Read(uc.br)
	unwatch()
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		_ = uc.Close()
		return nil, err
	}
	r := &Relayed{cl: c, c: uc, resp: resp,
		reusable: !resp.ConnectionClose() && !req.Header.ConnectionClose() && resp.Header.ContentLength() != -2}
	body := resp.BodyStream()
	switch {
	case body == nil:
		r.eof = true
	case bodyBuffered(resp, uc.br):
		if err := r.readAll(rc, body); err != nil {
			r.release()
			rc.Response.ResetBody()
			return nil, err
		}
	default:
		resp.Header.CopyTo(&rc.Response.Header)
		r.body = body
		r.client = rc.Conn()
		rc.Response.SetBodyStream(r, resp.Header.ContentLength())
		return r, nil
	}
	resp.Header.CopyTo(&rc.Response.Header)
	r.release()
	return nil, nil
}

// awaitHeader runs before the read of an answer's header. A client that
// leaves while the upstream works on its request (a 2026 client abandons a
// call by closing its request) must be seen then too, not only during a
// streamed body (Relayed.awaitOrWatch): closing the upstream connection
// shows the upstream that the request was abandoned, as the client's own
// close would have directly. As there, the watch starts only once the
// upstream has been silent for watchAfter (at once over TLS); unwatch ends
// it and must be called before the client's connection is read again.
func awaitHeader(uc *conn, client net.Conn) (unwatch func()) {
	if client == nil {
		return func() {}
	}
	if ic, ok := uc.Conn.(*idleConn); ok {
		ic.until = time.Now().Add(watchAfter)
		_, err := uc.br.Peek(1)
		ic.until = time.Time{}
		if err == nil || !isTimeout(err) {
			return func() {} // the answer has come, or its read reports the failure
		}
	}
	return sysconn.WatchClose(client, func() { _ = uc.Close() })
}

// isTimeout reports whether err is a timeout (of a read deadline). Only
// called with an error: the net.Error it declares escapes to the heap.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bodyBuffered reports whether the rest of resp's body is already in br,
// so that reading it to its end cannot wait on the upstream.
func bodyBuffered(resp *fasthttp.Response, br *bufio.Reader) bool {
	n := br.Buffered()
	switch cl := resp.Header.ContentLength(); {
	case cl >= 0:
		return n >= cl
	case cl == -1:
		b, err := br.Peek(n)
		return err == nil && chunkedComplete(b)
	}
	return false // the body ends when the upstream closes the connection
}

// chunkedComplete reports whether b starts with a whole chunked body
// (RFC 9112 §7.1): chunks, the last chunk and the trailer section. It only
// looks at the framing; fasthttp's reader validates it when it decodes.
func chunkedComplete(b []byte) bool {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		size, ok := chunkSize(b[:i])
		if !ok {
			return false
		}
		b = b[i+1:]
		if size == 0 {
			for { // trailer fields, then an empty line
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					return false
				}
				if i == 0 || (i == 1 && b[0] == '\r') {
					return true
				}
				b = b[i+1:]
			}
		}
		if size > len(b) || len(b)-size < 2 {
			return false
		}
		b = b[size+2:] // data and its CRLF
	}
}

// chunkSize parses a chunk-size line ("1a;ext=v\r"): hex digits, then
// optional whitespace, extensions and CR. Sizes over 2^31 are refused (no
// buffered body is that large).
func chunkSize(line []byte) (int, bool) {
	n, digits := 0, 0
	for _, c := range line {
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return n, digits > 0
		}
		if digits++; digits > 8 {
			return 0, false
		}
		n = n<<4 | d
	}
	return n, digits > 0
}

// Relayed is a streamed pass-through answer, the body stream of the
// client's response: its connection goes back to the pass-through pool
// when the body was read to its end and nothing follows it; otherwise the
// connection is closed (which also aborts an upstream stream the client
// left). It is read and closed by fasthttp's server goroutine, one call at
// a time.
type Relayed struct {
	cl       *Client
	c        *conn
	resp     *fasthttp.Response
	body     io.Reader
	reusable bool
	eof      bool
	// client is the client's connection, watched for a close (watch).
	client net.Conn
	// unwatch ends the watch on the client connection (nil: none).
	unwatch func()
	// left is set when the client closed its connection mid-answer.
	left atomic.Bool
	// se is told how a streamed answer ended (SetEnd).
	se StreamEnd
}

// SetEnd sets what is told how the stream ended. Call it before the
// handler that got r returns: fasthttp reads the stream after that.
func (r *Relayed) SetEnd(se StreamEnd) { r.se = se }

// clientGone runs on the watch's goroutine when the client left a streamed
// answer: closing the upstream connection ends the server goroutine's
// read of the body (fasthttp then closes the stream: release) and shows
// the upstream the client's close.
func (r *Relayed) clientGone() {
	r.left.Store(true)
	_ = r.c.Close()
}

// Read reads the upstream's body.
func (r *Relayed) Read(p []byte) (int, error) {
	if r.unwatch == nil && r.client != nil && r.c.br.Buffered() == 0 {
		r.awaitOrWatch()
	}
	n, err := r.body.Read(p)
	if err == io.EOF {
		r.eof = true
	}
	return n, err
}

// watchAfter is how long a streamed answer waits for more of its body
// before its client's connection is watched.
const watchAfter = 20 * time.Millisecond

// awaitOrWatch runs before a read of the body that would wait on the
// upstream. A client that leaves a streamed answer (a GET stream, a long
// POST answer) must be seen at once, not at the next failed write: closing
// the upstream connection then tells the upstream too, which stops sending
// into a stream nobody reads. Watching costs a goroutine and a few system
// calls, more than the rest of a short answer's relay, and most streamed
// answers are short: an SSE answer whose end the upstream wrote a moment
// after its event. So the watch starts only once the upstream has sent
// nothing for watchAfter (at once over TLS, where a timed-out read would
// spoil the connection). A read that timed out leaves the bufio reader and
// the connection usable: bufio hands the error out once, and Go
// connections survive a deadline.
func (r *Relayed) awaitOrWatch() {
	if ic, ok := r.c.Conn.(*idleConn); ok {
		ic.until = time.Now().Add(watchAfter)
		_, err := r.c.br.Peek(1)
		ic.until = time.Time{}
		if err == nil || !isTimeout(err) {
			return // more has come, or the read reports the failure
		}
	}
	r.unwatch = sysconn.WatchClose(r.client, r.clientGone)
}

// Close releases the answer; fasthttp calls it when the body is written or
// the client is gone.
func (r *Relayed) Close() error {
	r.release()
	return nil
}

func (r *Relayed) release() {
	if r.unwatch != nil {
		r.unwatch()
		r.unwatch = nil
	}
	_ = r.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(r.resp)
	if r.se != nil {
		switch {
		case r.left.Load():
			r.se.End(OutcomeClientGone)
		case !r.eof:
			r.se.End(OutcomeStreamCut) // upstream closed, idle or lifetime limit, client write failed
		default:
			r.se.End("")
		}
		r.se = nil
	}
	if r.eof && r.reusable && r.c.br.Buffered() == 0 && !r.left.Load() {
		r.cl.passPool.put(r.c)
	} else {
		_ = r.c.Close()
	}
}

// readAll moves a body that is already buffered into rc.Response.
func (r *Relayed) readAll(rc *fasthttp.RequestCtx, body io.Reader) error {
	bp := r.cl.relayBufs.Get().(*[]byte)
	defer r.cl.relayBufs.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		rc.Response.AppendBody(buf[:n])
		if err == io.EOF {
			r.eof = true
			return nil
		}
		if err != nil {
			return err
		}
	}
}
