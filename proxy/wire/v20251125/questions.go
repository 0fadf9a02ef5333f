package v20251125

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/wire"
)

// questionID returns the JSON string id under which the client sees the
// upstream request id upID.
func questionID(upID []byte) ([]byte, error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	out := make([]byte, 0, 2+len(wire.QuestionIDPrefix)+33+base64.RawURLEncoding.EncodedLen(len(upID)))
	out = append(out, '"')
	out = append(out, wire.QuestionIDPrefix...)
	out = hex.AppendEncode(out, nonce[:])
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, upID)
	return append(out, '"'), nil
}

// upstreamIDOf returns the upstream id inside a question id (raw JSON);
// ok is false when id is not one.
func upstreamIDOf(id []byte) ([]byte, bool) {
	s, ok := jsonx.UnquoteValue(id)
	if !ok {
		return nil, false
	}
	rest, found := strings.CutPrefix(s, wire.QuestionIDPrefix)
	if !found {
		return nil, false
	}
	_, enc, found := strings.Cut(rest, ".")
	if !found {
		return nil, false
	}
	up, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(up) == 0 {
		return nil, false
	}
	// One whole JSON value that is a valid id, or the answer would not be
	// JSON any more.
	sc := jsonx.Scanner{B: up}
	if raw, err := sc.Value(); err != nil || len(raw) != len(up) || !wire.ValidID(up) {
		return nil, false
	}
	return up, true
}

// toUpstreamAnswer gives a client's answer to a question the upstream's id
// back. A message without a question id is returned as is.
func toUpstreamAnswer(msg []byte) []byte {
	vals, err := jsonx.Members(msg, "id")
	if err != nil || vals[0] == nil {
		return msg
	}
	up, ok := upstreamIDOf(vals[0])
	if !ok {
		return msg
	}
	if out, err := jsonx.SetMember(msg, "id", up); err == nil {
		return out
	}
	return msg
}

// asQuestion returns the upstream request msg as the client sees it: with
// related-task _meta and a question id. It returns the question id too.
func asQuestion(msg []byte, upID []byte, taskID string) (out, qid []byte, err error) {
	if out, err = withRelatedTaskParams(msg, taskID); err != nil {
		return nil, nil, err
	}
	if qid, err = questionID(upID); err != nil {
		return nil, nil, err
	}
	if out, err = jsonx.SetMember(out, "id", qid); err != nil {
		return nil, nil, err
	}
	return out, qid, nil
}

// openQuestion is a question a stream delivered, remembered until the
// stream ends (redeliverOpen).
type openQuestion struct {
	taskID string
	qid    string // canonical question id
	msg    []byte
}

// noteQuestion appends msg to qs when it is a question (a request with a
// question id) of taskID.
func noteQuestion(qs []openQuestion, taskID string, msg []byte) []openQuestion {
	env, err := wire.ParseEnvelope(msg)
	if err != nil || !env.IsRequest() || !bytes.HasPrefix(env.ID, []byte(`"`+wire.QuestionIDPrefix)) {
		return qs
	}
	return append(qs, openQuestion{taskID: taskID, qid: wire.CanonicalID(env.ID), msg: msg})
}

// redeliverOpen puts the questions a stream delivered and nobody answered
// back in their tasks' queues, for the owner's next stream (the stream is
// gone). A question whose task ended is dropped by the store.
func (w *Wire) redeliverOpen(owner string, qs []openQuestion) {
	group := wire.StreamGroup(owner)
	for _, q := range qs {
		if w.Eng.Mail.Redeliver(owner, group, q.taskID, q.qid, q.msg) {
			w.Log.Debug().Str(wire.LogTaskID, q.taskID).Msg("stream ended before its question was answered; queued again")
		}
	}
}
