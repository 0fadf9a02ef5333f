package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/valyala/fasthttp"
)

// StatusFor maps an upstream transport error to an HTTP status (502, or
// 504 for a timeout) and a message for the client, which starts with
// "taskgate: ".
func StatusFor(err error) (int, string) {
	var ne net.Error
	var cve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &cve):
		return fasthttp.StatusBadGateway, "taskgate: upstream TLS certificate not trusted"
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fasthttp.StatusGatewayTimeout, "taskgate: upstream timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return fasthttp.StatusBadGateway, "taskgate: upstream unreachable (connection refused)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, fasthttp.ErrConnectionClosed):
		return fasthttp.StatusBadGateway, "taskgate: upstream closed the connection"
	}
	return fasthttp.StatusBadGateway, "taskgate: upstream request failed"
}

// FailureMessage describes a transport error of a background call for a
// task's status message: StatusFor's message without its "taskgate: "
// prefix, then the error.
func FailureMessage(err error) string {
	_, msg := StatusFor(err)
	return msg[len("taskgate: "):] + ": " + err.Error()
}
