package v20251125

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// TestAppendRelatedResult: the tasks/result answer rendered around the
// stored result says what parsing and re-emitting it says (T-40): the
// result's members and _meta[related-task] = {taskId}.
func TestAppendRelatedResult(t *testing.T) {
	for _, tc := range []struct {
		name, result string
	}{
		{name: "compact", result: `{"content":[{"type":"text","text":"hi"}]}`},
		{name: "empty", result: `{}`},
		{name: "empty with space", result: "{ \n }"},
		{name: "spaced", result: "{ \"content\" : [ ] ,\n \"isError\": false }\n"},
		{name: "nested _meta is not the result's", result: `{"content":[{"type":"text","text":"x","_meta":{"a":1}}],"structuredContent":{"_meta":2}}`},
		{name: "own _meta", result: `{"content":[],"_meta":{"progressToken":1}}`},
		{name: "own _meta, not an object", result: `{"content":[],"_meta":7}`},
		{name: "escapes", result: `{"content":[{"type":"text","text":"a\"}\\\n"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := []byte(`17`)
			old, err := withRelatedTask([]byte(tc.result), "task-1")
			if err != nil {
				t.Fatal(err)
			}
			want := decodeAnswer(t, wire.AppendResult(nil, id, old))
			got, err := appendRelatedResult([]byte("prefix"), id, []byte(tc.result), "task-1")
			if err != nil {
				t.Fatalf("appendRelatedResult(%s): %v", tc.result, err)
			}
			if !strings.HasPrefix(string(got), "prefix") {
				t.Fatalf("appendRelatedResult lost dst: %q", got)
			}
			if diff := cmp.Diff(want, decodeAnswer(t, got[len("prefix"):])); diff != "" {
				t.Errorf("appendRelatedResult(%s) = %s (-re-emitted +rendered):\n%s", tc.result, got, diff)
			}
		})
	}
	if _, err := appendRelatedResult(nil, []byte(`1`), []byte(`[1]`), "t"); err == nil {
		t.Errorf("appendRelatedResult of an array: no error")
	}
}

func decodeAnswer(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return v
}

// BenchmarkAppendOutcomeLarge renders the tasks/result answer of an
// 8 MiB result: one allocation of the answer's size.
func BenchmarkAppendOutcomeLarge(b *testing.B) {
	raw := []byte(`{"content":[{"type":"text","text":"` + strings.Repeat("x", 8<<20) + `"}],"structuredContent":{"bytes":8388608}}`)
	task := &taskstore.Task{ID: "0123456789abcdef0123456789abcdef", Status: taskstore.Completed}
	out := &taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: raw}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if a := appendOutcome(nil, []byte(`17`), task, out); len(a) < len(raw) {
			b.Fatalf("answer of %d bytes", len(a))
		}
	}
}

// TestAppendOutcomeLargeAllocs: the answer to tasks/result of an 8 MiB
// result is one buffer of about its size (twice that before: the result
// was re-emitted with its _meta, then copied into an answer grown from
// nothing).
func TestAppendOutcomeLargeAllocs(t *testing.T) {
	raw := []byte(`{"content":[{"type":"text","text":"` + strings.Repeat("x", 8<<20) + `"}]}`)
	task := &taskstore.Task{ID: "0123456789abcdef0123456789abcdef", Status: taskstore.Completed}
	out := &taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: raw}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a := appendOutcome(nil, []byte(`17`), task, out)
	runtime.ReadMemStats(&after)
	if got, want := after.TotalAlloc-before.TotalAlloc, uint64(len(raw))*5/4; got > want {
		t.Errorf("rendering a result of %d bytes allocated %d bytes, want at most %d", len(raw), got, want)
	}
	if len(a) < len(raw) {
		t.Errorf("answer of %d bytes", len(a))
	}
}
