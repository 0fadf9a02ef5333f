package redistest

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStart(t *testing.T) {
	addr := Start(t)
	reply, err := command(addr, "PING")
	if err != nil || !strings.Contains(reply, "PONG") {
		t.Fatalf("PING %s = %q, %v; want PONG", addr, reply, err)
	}
}

func TestStartCluster(t *testing.T) {
	addrs := StartCluster(t)
	for _, a := range addrs {
		reply, err := command(a, "CLUSTER INFO")
		if err != nil || !strings.Contains(reply, "cluster_state:ok") {
			t.Errorf("CLUSTER INFO %s = %q, %v; want cluster_state:ok", a, reply, err)
		}
	}
}
