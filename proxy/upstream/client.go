package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Transport is what taskgate's handler uses of the upstream. *Client
// implements it; a test may wrap a Client to make some exchanges fail.
type Transport interface {
	// Prepare makes req, a client's request, ready to forward: hop-by-hop
	// headers removed, Host per Options.RewriteHost, the upstream's scheme.
	Prepare(req *fasthttp.Request)
	// NewRequest makes req a POST to the upstream's MCP endpoint with the
	// headers of hdr (nil: none but Host) and taskgate's own Content-Type
	// and Accept.
	NewRequest(req *fasthttp.Request, hdr *fasthttp.RequestHeader)
	// Relay sends rc.Request (prepared) and puts the answer in
	// rc.Response. A non-nil Relayed means the answer streams after the
	// handler returns: the caller must give it a StreamEnd (SetEnd) before
	// it returns.
	Relay(rc *fasthttp.RequestCtx) (*Relayed, error)
	// Do sends req and reads the answer into resp with its body as a
	// stream, which the caller must close (rewritten answers).
	Do(req *fasthttp.Request, resp *fasthttp.Response) error
	// RoundTrip sends req on a background connection, which closes when
	// ctx ends; release the Call with Done.
	RoundTrip(ctx context.Context, req *fasthttp.Request) (*Call, error)
	// Send is RoundTrip's first half: it writes req (not used afterwards)
	// on a background connection; the Call's Await reads the answer.
	Send(ctx context.Context, req *fasthttp.Request) (*Call, error)
	// Post sends body with the headers hdr and discards the answer; it
	// returns the answer's status.
	Post(hdr *fasthttp.RequestHeader, body []byte, timeout time.Duration) (int, error)
	// Delete sends a DELETE with the headers hdr (a session's end) and
	// discards the answer; it returns the answer's status.
	Delete(hdr *fasthttp.RequestHeader, timeout time.Duration) (int, error)
	// DeleteSession ends the upstream session sid of protocol version
	// version (DELETE to the MCP endpoint).
	DeleteSession(sid, version string, timeout time.Duration) error
	// Ping checks that the upstream accepts connections and, for https,
	// completes a TLS handshake taskgate trusts.
	Ping(ctx context.Context) error
	// Close closes the idle connections; connections in use close when
	// their exchange ends.
	Close()
}

var _ Transport = (*Client)(nil)

// Options configure a Client. The durations must be positive (package
// proxy's Config supplies their defaults).
type Options struct {
	// URL is the upstream's MCP endpoint: an http or https URL with a
	// host. Its path is the endpoint's path ("/" when empty).
	URL *url.URL
	// RewriteHost sends the upstream's host in the Host header of
	// forwarded requests instead of the client's.
	RewriteHost bool
	// TLS configures TLS to an https upstream (nil: the system's roots);
	// it is completed by the URL's host as ServerName and TLS 1.2 as the
	// minimum unless set.
	TLS *tls.Config
	// Dial, when set, opens every connection instead of a TCP dial of the
	// URL's host.
	Dial func(ctx context.Context) (net.Conn, error)
	// NetIO keeps TCP connections plain net.Conns instead of sysconn.Conns.
	NetIO bool
	// DialTimeout bounds a TCP dial and a TLS handshake.
	DialTimeout time.Duration
	// IdleConn is how long an idle keep-alive connection is kept.
	IdleConn time.Duration
	// StreamIdleTimeout bounds each read of an answer.
	StreamIdleTimeout time.Duration
	// StreamMaxLifetime bounds an answer from the write of its request.
	StreamMaxLifetime time.Duration
}

// Client is the upstream client. Make it with New; Close it when done.
type Client struct {
	o       Options
	addr    string // host:port
	host    string // host[:port] as in the URL
	isTLS   bool
	tlsConf *tls.Config // for an https upstream: Options.TLS completed
	path    []byte
	dialer  net.Dialer
	// dial opens a plain connection to the upstream, the base of every
	// upstream connection.
	dial func(ctx context.Context) (net.Conn, error)

	hc       *fasthttp.HostClient // rewritten answers, messages to the upstream
	bgPool   pool                 // connections for background calls
	passPool pool                 // connections for pass-through (Relay)
	// relayBufs holds *[]byte buffers for reading buffered answers.
	relayBufs sync.Pool
}

// New returns a Client for o.URL, which the caller has validated.
func New(o Options) *Client {
	u := o.URL
	c := &Client{
		o:      o,
		host:   u.Host,
		isTLS:  u.Scheme == "https",
		path:   []byte(u.EscapedPath()),
		dialer: net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second},
	}
	if len(c.path) == 0 {
		c.path = []byte("/")
	}
	c.addr = u.Host
	if u.Port() == "" {
		if c.isTLS {
			c.addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			c.addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	if c.isTLS {
		c.tlsConf = tlsConfig(o.TLS, u.Hostname())
	}
	c.dial = c.dialSocket
	if o.Dial != nil {
		c.dial = o.Dial
	}
	c.bgPool = pool{max: 256, maxIdle: o.IdleConn}
	c.passPool = pool{max: 1024, maxIdle: o.IdleConn}
	c.relayBufs.New = func() any { b := make([]byte, 16<<10); return &b }
	c.hc = &fasthttp.HostClient{
		Addr:                          c.addr,
		Name:                          "taskgate",
		IsTLS:                         c.isTLS,
		TLSConfig:                     c.tlsConf,
		NoDefaultUserAgentHeader:      true,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		StreamResponseBody:            true,
		MaxIdleConnDuration:           o.IdleConn,
		MaxConns:                      4096,
		Dial:                          c.dialIdle,
		// Never replay a request that may have reached the upstream
		// (a tools/call must not run twice); fasthttp only retries idempotent
		// methods.
		MaxIdemponentCallAttempts: 1,
	}
	return c
}

// Path returns the path of the upstream's MCP endpoint, as escaped in the
// URL ("/" when the URL has none). The caller must not modify it.
func (c *Client) Path() []byte { return c.path }

// IdleConns returns how many idle connections the pass-through and the
// background pools hold.
func (c *Client) IdleConns() (pass, background int) { return c.passPool.len(), c.bgPool.len() }

// Close closes the idle connections of every pool.
func (c *Client) Close() {
	c.hc.CloseIdleConnections()
	c.bgPool.close()
	c.passPool.close()
}

// Prepare makes req ready to forward: hop-by-hop headers removed, Host per
// Options.RewriteHost, scheme matching the upstream.
func (c *Client) Prepare(req *fasthttp.Request) {
	StripRequestHopByHop(&req.Header)
	req.Header.ResetConnectionClose()
	if c.o.RewriteHost {
		// Request.Write takes the host from the parsed URI once it has
		// been parsed (rc.Path does): set both.
		req.URI().SetHost(c.host)
		req.Header.SetHost(c.host)
	}
	if c.isTLS {
		req.URI().SetScheme("https")
	} else if string(req.URI().Scheme()) == "https" {
		// A request taskgate received over TLS (--tls-cert) has an
		// https URI; the HostClient refuses it for a plain upstream.
		req.URI().SetScheme("http")
	}
}

// NewRequest makes req a POST to the upstream's MCP endpoint with the
// client's headers (from hdr, when given: Authorization, Host, ...) and
// taskgate's own Content-Type and Accept.
func (c *Client) NewRequest(req *fasthttp.Request, hdr *fasthttp.RequestHeader) {
	if hdr != nil {
		hdr.CopyTo(&req.Header)
		StripRequestHopByHop(&req.Header)
		req.Header.ResetConnectionClose()
	} else {
		req.Header.SetHost(c.host)
	}
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURIBytes(c.path)
	if hdr != nil {
		req.Header.SetHostBytes(hdr.Host())
		if c.o.RewriteHost || len(hdr.Host()) == 0 {
			req.Header.SetHost(c.host)
		}
	}
	req.Header.SetContentType("application/json")
	req.Header.Set(fasthttp.HeaderAccept, "application/json, text/event-stream")
}

// Do sends req through the HostClient; resp's body is a stream the caller
// closes. A request is never replayed.
func (c *Client) Do(req *fasthttp.Request, resp *fasthttp.Response) error {
	return c.hc.Do(req, resp)
}

// Post sends body upstream with the headers hdr and discards the answer.
// It returns the answer's status (200 when there was none).
func (c *Client) Post(hdr *fasthttp.RequestHeader, body []byte, timeout time.Duration) (int, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	hdr.CopyTo(&req.Header)
	req.Header.ResetConnectionClose()
	req.SetBody(body)
	err := c.hc.DoTimeout(req, resp, timeout)
	if err == nil {
		_ = resp.CloseBodyStream()
	}
	return resp.StatusCode(), err
}

// Delete sends a DELETE with the headers hdr, without a body, and discards
// the answer. It returns the answer's status (200 when there was none).
func (c *Client) Delete(hdr *fasthttp.RequestHeader, timeout time.Duration) (int, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	hdr.CopyTo(&req.Header)
	req.Header.SetMethod(fasthttp.MethodDelete)
	req.Header.ResetConnectionClose()
	req.Header.Del(fasthttp.HeaderContentType)
	req.Header.Del(fasthttp.HeaderContentLength)
	req.SetBody(nil)
	err := c.hc.DoTimeout(req, resp, timeout)
	if err == nil {
		_ = resp.CloseBodyStream()
	}
	return resp.StatusCode(), err
}

// Header names of the MCP Streamable HTTP transport that DeleteSession sets.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
)

// DeleteSession ends the upstream session sid (DELETE to the MCP endpoint
// with the session's id and protocol version) and discards the answer.
func (c *Client) DeleteSession(sid, version string, timeout time.Duration) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodDelete)
	req.SetRequestURIBytes(c.path)
	req.Header.SetHost(c.host)
	req.Header.Set(headerSessionID, sid)
	req.Header.Set(headerProtocolVersion, version)
	err := c.hc.DoTimeout(req, resp, timeout)
	if err == nil {
		_ = resp.CloseBodyStream()
	}
	return err
}

// Ping checks that the upstream accepts connections and, when it is https,
// completes a TLS handshake that taskgate trusts.
func (c *Client) Ping(ctx context.Context) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	// An https upstream must also pass the TLS handshake: a certificate
	// taskgate does not trust fails every call.
	if conn, err = c.handshake(ctx, conn); err != nil {
		return err
	}
	return conn.Close()
}
