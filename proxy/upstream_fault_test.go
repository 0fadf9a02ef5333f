package proxy

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/upstream"
)

// faultTransport is a Handler's upstream client with some exchanges made
// to fail: a nil error passes the exchange to the real client.
type faultTransport struct {
	upstream.Transport
	relayErr, roundTripErr error
}

func (f *faultTransport) Relay(rc *fasthttp.RequestCtx) (*upstream.Relayed, error) {
	if f.relayErr != nil {
		return nil, f.relayErr
	}
	return f.Transport.Relay(rc)
}

func (f *faultTransport) RoundTrip(ctx context.Context, req *fasthttp.Request) (*upstream.Call, error) {
	if f.roundTripErr != nil {
		return nil, f.roundTripErr
	}
	return f.Transport.RoundTrip(ctx, req)
}

func (f *faultTransport) Send(ctx context.Context, req *fasthttp.Request) (*upstream.Call, error) {
	if f.roundTripErr != nil {
		return nil, f.roundTripErr
	}
	return f.Transport.Send(ctx, req)
}

// TestUpstreamFaults: transport errors injected through upstream.Transport
// (no dial function swapped) reach the client as the mapped answers: a
// pass-through that times out gets 504 with the request's id, a task whose
// call cannot connect fails with a status message naming the cause, and
// nothing reaches the upstream.
func TestUpstreamFaults(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	e.h.up = &faultTransport{
		Transport:    e.h.up,
		relayErr:     &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded},
		roundTripErr: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
	}
	e.h.f.Up = e.h.up // the eras reach the upstream through the front they share
	r := e.call(alice, 7, "tools/call", `{"name":"echo","arguments":{"text":"x"}}`)
	if r.httpStatus != fasthttp.StatusGatewayTimeout || r.Error == nil || string(r.ID) != "7" || r.Error.Message != "taskgate: upstream timed out" {
		t.Fatalf("plain call over a timing-out transport: %d %s", r.httpStatus, r.raw)
	}
	task := e.createTask(alice, "echo", `{"text":"x"}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "failed")
	if !strings.HasPrefix(got.StatusMessage, "upstream unreachable (connection refused): ") {
		t.Errorf("statusMessage = %q, want the refused connection named", got.StatusMessage)
	}
	if reqs, _, _ := e.up.snapshot(); len(reqs) != 0 {
		t.Errorf("upstream received %d requests through a failing transport", len(reqs))
	}
}
