package upstream

import (
	"bufio"
	"context"
	"io"
	"time"

	"github.com/valyala/fasthttp"
)

// Call is one request and its streamed response on a connection of the
// background pool. The connection closes when the context given to
// RoundTrip ends (aborting the upstream request: tasks/cancel, timeouts,
// shutdown); after a response read to its end it goes back to the pool.
// A Call belongs to one goroutine, except Abort.
type Call struct {
	// Resp is the response, from Await on (a call waiting for its answer
	// holds none); its body is a stream (BodyStream), valid until Done.
	Resp   *fasthttp.Response
	cl     *Client
	c      *conn
	stop   func() bool
	reuse  bool // the body was read to its end: the connection is clean
	waited bool // Wait saw the answer arrive
}

// Abort closes the connection at once, unblocking a reader of the body.
// It may be called from any goroutine.
func (x *Call) Abort() { _ = x.c.Close() }

// SetReusable records whether the body was read to its end (the
// connection may then go back to the pool at Done).
func (x *Call) SetReusable(ok bool) { x.reuse = ok }

// Done releases the response and pools or closes the connection.
func (x *Call) Done() {
	ctxAlive := x.stop()
	reuse := x.reuse && ctxAlive && x.Resp != nil && !x.Resp.ConnectionClose() && x.Resp.Header.ContentLength() != -2
	if x.Resp != nil {
		fasthttp.ReleaseResponse(x.Resp) // before the reader goes back: the body stream reads from it
		x.Resp = nil
	}
	if x.c.dropReader() && reuse {
		x.cl.bgPool.put(x.c)
	} else {
		_ = x.c.Close()
	}
}

// DrainEnd reads what is left of a body that should be ending (an SSE
// stream after its response) for a moment; only a body read to its end
// leaves the connection reusable.
func (x *Call) DrainEnd(body io.Reader) {
	if err := x.c.SetReadDeadline(time.Now().Add(drainWait)); err != nil {
		return
	}
	_, err := io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	x.reuse = err == nil && x.c.SetReadDeadline(time.Time{}) == nil
}

// drainWait is how long a finished SSE answer may take to end.
const drainWait = 200 * time.Millisecond

// RoundTrip sends req on a pooled (or new) connection and returns the
// response with its body as a stream: Send, then Await. A pooled
// connection is used only while younger than IdleConn (below the
// upstream's idle limit, so the upstream is not closing it as we write); a
// request is never replayed.
func (c *Client) RoundTrip(ctx context.Context, req *fasthttp.Request) (*Call, error) {
	x, err := c.Send(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := x.Await(); err != nil {
		x.Done()
		return nil, err
	}
	return x, nil
}

// Send writes req on a pooled (or new) connection; req is not used
// afterwards. Await then reads the response; Done must follow either way.
func (c *Client) Send(ctx context.Context, req *fasthttp.Request) (*Call, error) {
	uc := c.bgPool.get()
	if uc == nil {
		nc, err := c.dialBackground(ctx)
		if err != nil {
			return nil, err
		}
		uc = newBgConn(nc)
	}
	x := &Call{cl: c, c: uc}
	x.stop = context.AfterFunc(ctx, x.Abort)
	bw := bgWriters.Get().(*bufio.Writer)
	bw.Reset(uc)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	bgWriters.Put(bw)
	if err != nil {
		x.reuse = false
		x.Done()
		return nil, err
	}
	return x, nil
}

// Await reads the response headers of the request Send wrote. It waits
// for the answer without a read buffer (a call may wait for minutes,
// thousands of them at once) and reads it with a pooled one.
func (x *Call) Await() error {
	x.reuse = false
	if err := x.Wait(); err != nil {
		return err
	}
	x.c.takeReader()
	x.Resp = fasthttp.AcquireResponse()
	x.Resp.StreamBody = true
	return x.Resp.Read(x.c.br)
}

// Wait blocks until the answer starts to arrive (or the connection fails
// or is aborted), holding no read buffer; Await after it reads the answer
// without waiting again. It is Await's first part, for a caller that waits
// where its stack is shallow.
func (x *Call) Wait() error {
	if x.waited {
		return nil
	}
	if w, ok := x.c.Conn.(interface{ WaitReadable() error }); ok {
		if err := w.WaitReadable(); err != nil {
			return err
		}
	}
	x.waited = true
	return nil
}
