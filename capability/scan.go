package capability

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// The rewrites read messages with jsonx's positional scanner under its
// whole-object rule (jsonx.ScanObject): a key twice in an object the
// rewrite inspects makes the message malformed, keys match exactly.

// validate reports invalid JSON as encoding/json does (the same grammar and
// its nesting limit), wrapping ErrMalformed; what names the input.
func validate(msg []byte, what string) error {
	if jsonx.ValidDepth(msg, jsonx.EncodingJSONDepth) != nil {
		return fmt.Errorf("capability: %sinvalid JSON: %w", what, ErrMalformed)
	}
	return nil
}

// scanObject is jsonx.ScanObject with its errors wrapping ErrMalformed;
// where names the object in them.
func scanObject(data []byte, i int, buf []jsonx.Member, where string) ([]jsonx.Member, int, error) {
	ms, end, err := jsonx.ScanObject(data, i, buf)
	if err != nil {
		var dup *jsonx.DupKeyError
		if errors.As(err, &dup) {
			return nil, 0, fmt.Errorf("capability: duplicate key %q in %s: %w", dup.Key, where, ErrMalformed)
		}
		return nil, 0, fmt.Errorf("capability: key in %s: %w", where, ErrMalformed)
	}
	return ms, end, nil
}

// unquote returns the string value of the JSON string token s (with
// quotes) of a validated message, decoded as encoding/json decodes it.
func unquote(s []byte) ([]byte, error) {
	body := s[1 : len(s)-1]
	v, ok := jsonx.UnquoteBytes(body, bytes.IndexByte(body, '\\') >= 0)
	if !ok {
		return nil, errBadString
	}
	return v, nil
}

var errBadString = errors.New("capability: string does not decode")
