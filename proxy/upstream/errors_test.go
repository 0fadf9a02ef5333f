package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestStatusFor(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{name: "fasthttp timeout", err: fasthttp.ErrTimeout, want: 504},
		{name: "deadline exceeded", err: fmt.Errorf("read: %w", os.ErrDeadlineExceeded), want: 504},
		{name: "context deadline", err: context.DeadlineExceeded, want: 504},
		{name: "net timeout", err: &net.OpError{Op: "read", Err: timeoutErr{}}, want: 504},
		{name: "refused", err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, want: 502},
		{name: "reset", err: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, want: 502},
		{name: "EOF", err: io.EOF, want: 502},
		{name: "unexpected EOF", err: io.ErrUnexpectedEOF, want: 502},
		{name: "connection closed", err: fasthttp.ErrConnectionClosed, want: 502},
		{name: "anything else", err: errors.New("x"), want: 502},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := StatusFor(tc.err)
			if got != tc.want || !strings.HasPrefix(msg, "taskgate: ") {
				t.Errorf("StatusFor(%v) = %d, %q; want %d", tc.err, got, msg, tc.want)
			}
		})
	}
}
