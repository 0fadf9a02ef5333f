package v20260728

import "testing"

// TestURLElicitationMapping: a -32042 error becomes URL-mode input
// requests without elicitationId, and a task's -32042 reads as -32603
// with its message and data (M-12); other errors are left alone.
func TestURLElicitationMapping(t *testing.T) {
	e := []byte(`{"code":-32042,"message":"URL elicitation required","data":{"elicitations":[` +
		`{"mode":"url","message":"Sign in","url":"https://a.example/x","elicitationId":"e1"},` +
		`{"mode":"url","message":"Pay","url":"https://b.example/y","elicitationId":"e2"}]}}`)
	reqs, ok := urlElicitationRequests(e)
	want := `{"url-1":{"method":"elicitation/create","params":{"mode":"url","message":"Sign in","url":"https://a.example/x"}},` +
		`"url-2":{"method":"elicitation/create","params":{"mode":"url","message":"Pay","url":"https://b.example/y"}}}`
	if !ok || string(reqs) != want {
		t.Errorf("urlElicitationRequests = %s, %v; want %s", reqs, ok, want)
	}
	if got := string(failedTaskError(e)); got != `{"code":-32603,"message":"URL elicitation required","data":{"elicitations":[`+
		`{"mode":"url","message":"Sign in","url":"https://a.example/x","elicitationId":"e1"},`+
		`{"mode":"url","message":"Pay","url":"https://b.example/y","elicitationId":"e2"}]}}` {
		t.Errorf("failedTaskError = %s", got)
	}
	other := []byte(`{"code":-32603,"message":"boom"}`)
	if _, ok := urlElicitationRequests(other); ok || string(failedTaskError(other)) != string(other) {
		t.Errorf("a -32603 error was rewritten")
	}
	if res, missing, ok := urlElicitationAnswer(e, &reqMeta{}); !ok || res != nil ||
		string(missing) != `{"requiredCapabilities":{"elicitation":{"url":{}}}}` {
		t.Errorf("without elicitation: %s %s %v", res, missing, ok)
	}
}
