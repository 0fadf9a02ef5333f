package redistest

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStart(t *testing.T) {
	addr := Start(t)
	reply, err := Command(addr, "PING")
	if err != nil || !strings.Contains(reply, "PONG") {
		t.Fatalf("PING %s = %q, %v; want PONG", addr, reply, err)
	}
}

func TestStartCluster(t *testing.T) {
	addrs := StartCluster(t)
	for _, a := range addrs {
		reply, err := Command(a, "CLUSTER INFO")
		if err != nil || !strings.Contains(reply, "cluster_state:ok") {
			t.Errorf("CLUSTER INFO %s = %q, %v; want cluster_state:ok", a, reply, err)
		}
	}
}

// A test skipped by Need for a missing program is named in Report's
// banner, once.
func TestReportNamesSkippedTests(t *testing.T) {
	ttyPath = ""
	t.Run("needs a missing program", func(t *testing.T) {
		Need(t, "taskgate-no-such-program")
		t.Error("Need returned for a missing program")
	})
	var buf strings.Builder
	Report(&buf)
	out := buf.String()
	if !strings.Contains(out, "TESTS SKIPPED") || !strings.Contains(out, "taskgate-no-such-program is not on PATH: 1 tests skipped") ||
		!strings.Contains(out, "TestReportNamesSkippedTests/needs_a_missing_program") {
		t.Errorf("Report = %q; want a banner naming the program and the skipped test", out)
	}
	skipped.mu.Lock()
	delete(skipped.tests, "taskgate-no-such-program")
	skipped.mu.Unlock()
}
