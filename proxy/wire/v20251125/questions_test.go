package v20251125

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/taskgate/taskgate/proxy/wire"
)

// Question ids carry the upstream's id and give it back; anything else is
// left alone.
func TestQuestionIDRoundTrip(t *testing.T) {
	for _, up := range []string{`"srv-e1"`, `7`, `"with \"quotes\" and ünïcode"`, `-3`} {
		qid, err := questionID([]byte(up))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(qid, []byte(`"`+wire.QuestionIDPrefix)) {
			t.Errorf("questionID(%s) = %s, want the prefix", up, qid)
		}
		msg := []byte(`{"jsonrpc":"2.0","id":` + string(qid) + `,"result":{}}`)
		if got, want := string(toUpstreamAnswer(msg)), `{"jsonrpc":"2.0","id":`+up+`,"result":{}}`; got != want {
			t.Errorf("toUpstreamAnswer(%s) = %s, want %s", msg, got, want)
		}
	}
	bad := base64URL(`"unterminated`)
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":"client-1","result":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":"` + wire.QuestionIDPrefix + `00.` + bad + `","result":{}}`,
		`{"jsonrpc":"2.0","id":"` + wire.QuestionIDPrefix + `nodot","result":{}}`,
	} {
		if got := string(toUpstreamAnswer([]byte(msg))); got != msg {
			t.Errorf("toUpstreamAnswer(%s) = %s, want it unchanged", msg, got)
		}
	}
}

func base64URL(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
