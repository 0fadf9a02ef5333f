package jsonx

// Kind is what a JSON-RPC 2.0 message is. Every reader of JSON-RPC in
// taskgate classifies messages with Classify, so that "a response" means
// the same thing everywhere.
type Kind uint8

const (
	// KindNone: no method and neither result nor error. Not a valid
	// message; readers that forward what they do not understand pass it on.
	KindNone Kind = iota
	// KindRequest: a method and an id; it expects a response.
	KindRequest
	// KindNotification: a method without an id; nothing answers it.
	KindNotification
	// KindResponse: no method, and a result or an error (its id names the
	// request it answers).
	KindResponse
	// KindBatch: a JSON array of messages.
	KindBatch
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	case KindBatch:
		return "batch"
	}
	return "none"
}

// Classify returns the kind of a single (non-batch) message from its
// method ("" when absent), whether it has an id (a null id counts as none
// for a request) and whether it has a result or an error member.
func Classify(method string, hasID, hasOutcome bool) Kind {
	switch {
	case method != "" && hasID:
		return KindRequest
	case method != "":
		return KindNotification
	case hasOutcome:
		return KindResponse
	}
	return KindNone
}
