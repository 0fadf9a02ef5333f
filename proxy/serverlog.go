package proxy

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// Errors fasthttp reports about a request it could not read embed the raw
// request buffer in their text (headers, an Authorization token, the body):
// such text never reaches the log. requestErrorKind names what was wrong
// instead, from the error's type or sentinel alone.
const (
	kindBodyTooLarge   = "body_too_large"
	kindHeaderTooLarge = "header_too_large"
	kindContentLength  = "bad_content_length"
	kindTransferEnc    = "bad_transfer_encoding"
	kindChunkedBody    = "bad_chunked_body"
	kindRequestURI     = "bad_request_uri"
	kindRequestLine    = "bad_request_line"
	kindTimeout        = "timeout"
	kindConnection     = "connection_error"
	kindMalformed      = "malformed_request"
)

// requestErrorKind classifies an error fasthttp's server met while reading
// a request, and the HTTP status that answers it.
func requestErrorKind(err error) (kind string, status int) {
	var small *fasthttp.ErrSmallBuffer
	var chunk fasthttp.ErrBrokenChunk
	var ne net.Error
	var host fasthttp.InvalidHostError
	var esc fasthttp.EscapeError
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return kindBodyTooLarge, fasthttp.StatusRequestEntityTooLarge
	case errors.As(err, &small), errors.Is(err, fasthttp.ErrSmallReadBuffer):
		return kindHeaderTooLarge, fasthttp.StatusRequestHeaderFieldsTooLarge
	case errors.Is(err, fasthttp.ErrDuplicateContentLength), errors.Is(err, fasthttp.ErrNonNumericChars):
		return kindContentLength, fasthttp.StatusBadRequest
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
		return kindTransferEnc, fasthttp.StatusBadRequest
	case errors.As(err, &chunk):
		return kindChunkedBody, fasthttp.StatusBadRequest
	case errors.Is(err, fasthttp.ErrorInvalidURI), errors.Is(err, fasthttp.ErrEmptyRequestURI),
		errors.As(err, &host), errors.As(err, &esc):
		return kindRequestURI, fasthttp.StatusBadRequest
	case errors.Is(err, fasthttp.ErrMissingRequestMethod), errors.Is(err, fasthttp.ErrUnsupportedRequestMethod),
		errors.Is(err, fasthttp.ErrExtraWhitespaceInRequestLine):
		return kindRequestLine, fasthttp.StatusBadRequest
	case errors.As(err, &ne) && ne.Timeout():
		return kindTimeout, fasthttp.StatusRequestTimeout
	case errors.As(err, new(*net.OpError)):
		return kindConnection, fasthttp.StatusBadRequest
	}
	return kindMalformed, fasthttp.StatusBadRequest
}

// ServerLogger returns the fasthttp.Logger for the server in front of a
// Handler: fasthttp's own messages as structured warnings, with any error
// among their arguments replaced by its kind (requestErrorKind), since an
// error's text may carry request bytes. Set fasthttp.Server's
// SecureErrorLogMessage too, so the errors themselves are built without
// request contents.
func ServerLogger(l zerolog.Logger) fasthttp.Logger { return serverLogger{l} }

type serverLogger struct{ l zerolog.Logger }

func (s serverLogger) Printf(format string, args ...any) {
	safe := make([]any, len(args))
	var kind string
	for i, a := range args {
		switch v := a.(type) {
		case error:
			kind, _ = requestErrorKind(v)
			safe[i] = kind
		case net.Addr:
			safe[i] = v.String()
		case string, []byte:
			// Strings may be request bytes (fasthttp's request logger
			// prints the request line): only their length is kept.
			safe[i] = fmt.Sprintf("<%d bytes>", len(fmt.Sprint(v)))
		default:
			safe[i] = a
		}
	}
	// A connection ended by a malformed request was logged by ErrorHandler
	// already.
	lvl := zerolog.WarnLevel
	if strings.HasPrefix(format, "error when serving connection") {
		lvl = zerolog.DebugLevel
	}
	e := s.l.WithLevel(lvl).Str("component", "fasthttp")
	if kind != "" {
		e = e.Str(logErrorKind, kind)
	}
	e.Msg(strings.TrimSpace(fmt.Sprintf(format, safe...)))
}
