package e2e

// Issue 11 §5 and §6 with the built binary: malformed HTTP requests never
// put request bytes (tokens, bodies) into the log, and an oversized body
// gets a 413 the client can read.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	logSecretToken   = "tok-SECRET-8f3a1c"
	logSecretPayload = "PAYLOAD-SECRET-77d2"
)

// rawExchange writes req on a new connection to addr and returns the
// status line of the answer ("" when none came) and any read error.
func rawExchange(t *testing.T, addr, req string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// Malformed requests carrying an Authorization token and a secret payload
// are refused, and neither the token nor the payload appears anywhere in
// taskgate's log; each refusal is logged with its kind and the peer.
func TestMalformedRequestsLogNoSecrets(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	g := startTaskgate(t, up.URL)
	u, _ := url.Parse(g.URL)
	auth := "Authorization: Bearer " + logSecretToken + "\r\n"
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + logSecretPayload + `"}}}`
	head := "POST /mcp HTTP/1.1\r\nHost: " + u.Host + "\r\n" + auth + "Content-Type: application/json\r\n"
	var kinds []string
	for _, tc := range []struct {
		name, req, wantStatus, wantKind string
	}{
		{"bad Content-Length", head + "Content-Length: 1x0\r\n\r\n" + body, "400", "bad_content_length"},
		{"two Content-Lengths", head + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + body, "400", "bad_content_length"},
		{"obfuscated Transfer-Encoding", head + "Transfer-Encoding: xchunked\r\n\r\n" + body, "400", "bad_transfer_encoding"},
		{"broken chunked body", head + "Transfer-Encoding: chunked\r\n\r\n5\r\n" + body + "\r\n", "400", "bad_chunked_body"},
		{"oversized header", head + "X-Pad: " + strings.Repeat("a", 16<<10) + "\r\nContent-Length: 3\r\n\r\n" + body, "431", "header_too_large"},
		{"bad request URI", "POST http://%zz/mcp HTTP/1.1\r\nHost: " + u.Host + "\r\n" + auth + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, "400", "bad_request_uri"},
	} {
		status, err := rawExchange(t, u.Host, tc.req)
		if !strings.Contains(status, " "+tc.wantStatus+" ") {
			t.Errorf("%s: answer %q (%v); want HTTP %s", tc.name, status, err, tc.wantStatus)
		}
		kinds = append(kinds, `"error_kind":"`+tc.wantKind+`"`)
	}
	waitFor(t, 5*time.Second, "the refusals in the log", func() bool {
		return strings.Count(g.p.Output(), `"request refused"`) >= len(kinds)
	})
	// A well-formed request with the same secrets (no session: the
	// upstream refuses it), for contrast: it is logged without them too.
	if status, err := rawExchange(t, u.Host, head+"Content-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body); status == "" {
		t.Errorf("well-formed request: no answer (%v)", err)
	}
	out := g.p.Output()
	for _, secret := range []string{logSecretToken, logSecretPayload} {
		if strings.Contains(out, secret) {
			t.Errorf("taskgate's log contains %q:\n%s", secret, out)
		}
	}
	for _, k := range kinds {
		if !strings.Contains(out, k) {
			t.Errorf("no refusal logged with %s", k)
		}
	}
	if !strings.Contains(out, `"peer":"127.0.0.1:`) {
		t.Errorf("refusals are not logged with the peer:\n%s", out)
	}
}

// An oversized body is answered 413 and the client reads the answer,
// even when it has sent the whole body before reading: no connection
// reset destroys it first.
func TestOversizedBody413Readable(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	g := startTaskgate(t, up.URL, "--max-body-size", "65536")
	u, _ := url.Parse(g.URL)
	for i := range 3 {
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		body := bytes.Repeat([]byte("x"), 4<<20)
		hdr := "POST /mcp HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		_, werr := c.Write(append([]byte(hdr), body...))
		resp, rerr := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case rerr != nil:
			t.Errorf("run %d: reading the answer to an oversized body: %v (write: %v); want a readable 413", i, rerr, werr)
		case resp.StatusCode != http.StatusRequestEntityTooLarge:
			t.Errorf("run %d: status %d; want 413", i, resp.StatusCode)
		default:
			b, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Contains(b, []byte("exceeds the limit of 65536 bytes")) {
				t.Errorf("run %d: 413 body %q, %v", i, b, err)
			}
		}
		if errors.Is(werr, syscall.ECONNRESET) {
			t.Errorf("run %d: the connection was reset while the body was sent", i)
		}
		c.Close()
	}
}

// A client that closes its GET stream makes taskgate (the built binary)
// close its upstream stream at once, as a direct connection would: the
// upstream stops routing messages into a stream nobody reads. The
// upstream is a hand-made one that reports when its stream's connection
// closes; both a plain pass-through stream and the GET stream of a tasks
// session are tried.
func TestClientCloseOfGetStreamReachesUpstream(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for { // request headers (a GET has no body)
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if l == "\r\n" {
						break
					}
				}
				ev := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}\n\n"
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
					strconv.FormatInt(int64(len(ev)), 16)+"\r\n"+ev+"\r\n"); err != nil {
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
				_, _ = io.Copy(io.Discard, br)
				closed <- struct{}{}
			}()
		}
	}()
	g := startTaskgate(t, "http://"+ln.Addr().String()+"/mcp")
	u, _ := url.Parse(g.URL)
	for _, version := range []string{"", "Mcp-Protocol-Version: 2025-11-25\r\n"} {
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /mcp HTTP/1.1\r\nHost: "+u.Host+"\r\nAccept: text/event-stream\r\nMcp-Session-Id: s1\r\n"+version+"\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the GET stream (%q): %v", version, err)
			}
			if strings.Contains(l, "notifications/message") {
				break
			}
		}
		opened := time.Now()
		c.Close()
		select {
		case <-closed:
			t.Logf("GET stream %q: the upstream saw the client's close after %v", strings.TrimSpace(version), time.Since(opened).Round(time.Millisecond))
		case <-time.After(5 * time.Second): // far below --keepalive (15 s) and any idle limit
			t.Errorf("GET stream %q: the upstream stream stayed open after the client closed", strings.TrimSpace(version))
		}
	}
}
