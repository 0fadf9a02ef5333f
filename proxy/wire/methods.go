package wire

// The method table: every JSON-RPC method taskgate knows by name, with what
// the front needs of it (its metric label, whether it may be sent in a
// batch, whether it is traced). What an era does with a method is that
// era's column, kept in the era's package (its Serve switches on the
// method); nothing else decides which methods taskgate serves itself.
// Adding a method is one entry here plus its case in the eras that serve
// it.

// JSON-RPC method names taskgate routes on.
const (
	MethodInitialize  = "initialize"
	MethodToolsList   = "tools/list"
	MethodToolsCall   = "tools/call"
	MethodTasksGet    = "tasks/get"
	MethodTasksResult = "tasks/result"
	MethodTasksList   = "tasks/list"
	MethodTasksCancel = "tasks/cancel"
	MethodPing        = "ping"

	// Methods of the 2026 wire that the 2025 wire does not have.
	MethodDiscover    = "server/discover"
	MethodTasksUpdate = "tasks/update"
	// MethodSubscriptionsListen opens a stream of the notifications a
	// client asks for (list changes, resource updates, task status).
	MethodSubscriptionsListen = "subscriptions/listen"

	// MethodLogMessage is a log message from the server.
	MethodLogMessage = "notifications/message"
	// MethodProgress is a progress notification.
	MethodProgress = "notifications/progress"
	// MethodTaskStatus is the 2025-11-25 task status notification.
	MethodTaskStatus = "notifications/tasks/status"

	NotificationCancelled = "notifications/cancelled"

	// Requests an upstream may send to the client about a running call.
	MethodElicit    = "elicitation/create"
	MethodSampling  = "sampling/createMessage"
	MethodRootsList = "roots/list"
)

// Spec is one entry of the method table.
type Spec struct {
	Name   string
	Metric string // the method's label in metrics (method="...")
	// Always: served even when the upstream has tasks natively (others
	// then pass through), and refused in a batch of any session.
	Always bool
	// BatchOK: the method may be sent in a batch. A method taskgate serves
	// cannot be (it answers single messages): a batch holding one is
	// refused in sessions with tasks unless the upstream has tasks
	// natively (Always: in every session).
	BatchOK bool
	// Traced: a request of this method gets a trace span (when tracing is
	// on): the methods some era serves itself.
	Traced bool
}

// methods is the method table.
var methods = [...]Spec{
	// Served by taskgate on some wire.
	{Name: MethodInitialize, Metric: MethodInitialize, Always: true, Traced: true},
	{Name: MethodToolsList, Metric: MethodToolsList, Traced: true},
	{Name: MethodToolsCall, Metric: MethodToolsCall, Traced: true},
	{Name: MethodTasksGet, Metric: MethodTasksGet, Traced: true},
	{Name: MethodTasksResult, Metric: MethodTasksResult, Traced: true},
	{Name: MethodTasksList, Metric: MethodTasksList, Traced: true},
	{Name: MethodTasksCancel, Metric: MethodTasksCancel, Traced: true},
	{Name: MethodTasksUpdate, Metric: MethodTasksUpdate, BatchOK: true, Traced: true},
	{Name: MethodDiscover, Metric: MethodDiscover, BatchOK: true, Traced: true},
	{Name: MethodSubscriptionsListen, Metric: MethodSubscriptionsListen, BatchOK: true, Traced: true},
	// A notifications/cancelled naming an id of taskgate's own upstream
	// requests is swallowed; any other passes through.
	{Name: NotificationCancelled, Metric: NotificationCancelled, BatchOK: true},

	// Passed through, or forwarded on some wire; known by name for their
	// metric label.
	{Name: MethodPing, Metric: MethodPing, BatchOK: true},
	{Name: "notifications/initialized", Metric: "notifications/initialized", BatchOK: true},
	{Name: MethodProgress, Metric: MethodProgress, BatchOK: true},
	{Name: "notifications/roots/list_changed", Metric: "notifications/roots/list_changed", BatchOK: true},
	{Name: "resources/list", Metric: "resources/list", BatchOK: true},
	{Name: "resources/read", Metric: "resources/read", BatchOK: true},
	{Name: "resources/templates/list", Metric: "resources/templates/list", BatchOK: true},
	{Name: "prompts/list", Metric: "prompts/list", BatchOK: true},
	{Name: "prompts/get", Metric: "prompts/get", BatchOK: true},
	{Name: "completion/complete", Metric: "completion/complete", BatchOK: true},
	{Name: "logging/setLevel", Metric: "logging/setLevel", BatchOK: true},
	{Name: "resources/subscribe", Metric: "resources/subscribe", BatchOK: true},
	{Name: "resources/unsubscribe", Metric: "resources/unsubscribe", BatchOK: true},
}

// Methods returns the method table (for tests and documentation).
func Methods() []Spec { return methods[:] }

// methodBuckets indexes the table by a hash of a name's length and two of
// its bytes: a lookup compares one name, mostly, so the envelope parser
// finds the entry about as cheaply as with a string switch (a map's
// hashing costs ten times that). It is filled by init, not by an
// initializer: an initializer that reads methods from a function would be
// an initialization cycle once a handler reached from the table looks a
// method up.
var methodBuckets [128][]*Spec

// methodBucket is the bucket of a name of length n whose last and middle
// bytes are last and mid.
func methodBucket(n int, last, mid byte) int {
	return (n + int(last)*3 + int(mid)*7) & (len(methodBuckets) - 1)
}

func init() {
	for i := range methods {
		s := &methods[i]
		n := len(s.Name)
		k := methodBucket(n, s.Name[n-1], s.Name[n/2])
		methodBuckets[k] = append(methodBuckets[k], s)
	}
}

// Lookup returns the entry of method m, or nil. It does not allocate.
func Lookup(m []byte) *Spec {
	n := len(m)
	if n == 0 {
		return nil
	}
	for _, s := range methodBuckets[methodBucket(n, m[n-1], m[n/2])] {
		if string(m) == s.Name {
			return s
		}
	}
	return nil
}

// LookupString is Lookup for a string.
func LookupString(m string) *Spec {
	n := len(m)
	if n == 0 {
		return nil
	}
	for _, s := range methodBuckets[methodBucket(n, m[n-1], m[n/2])] {
		if m == s.Name {
			return s
		}
	}
	return nil
}

// Pseudo-method labels of requests that carry no single method.
const (
	MetricNoMethod  = ""           // a message without a method (a response)
	MetricBatch     = "batch"      // a batch
	MetricGetStream = "get_stream" // a GET of the session's SSE stream
)

// MetricLabel bounds label cardinality: client-chosen method names are not
// used as labels unless they are in the method table.
func MetricLabel(m string) string {
	switch m {
	case MetricNoMethod, MetricBatch, MetricGetStream:
		return m
	}
	if s := LookupString(m); s != nil {
		return s.Metric
	}
	return "other"
}
