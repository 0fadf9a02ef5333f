package main

import (
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHistBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 123456789, 1<<40 + 12345, 1<<63 + 1} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d out of range", v, i)
		}
		if lo, hi := histLow(i), histHigh(i); v < lo || v > hi {
			t.Errorf("%d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
		if v >= histSub {
			if w := histHigh(i) - histLow(i) + 1; float64(w)/float64(v) > 1.0/(histSub/2) {
				t.Errorf("bucket of %d is %d wide", v, w)
			}
		}
	}
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	var all []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := time.Duration(r.ExpFloat64() * float64(time.Millisecond))
		h.record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := all[int(q*float64(len(all)))-1]
		got := h.quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.01 || diff < -0.01 {
			t.Errorf("q%.2f = %v, want %v (±1%%)", q, got, want)
		}
	}
	if time.Duration(h.max) != all[len(all)-1] || time.Duration(h.min) != all[0] {
		t.Errorf("min/max %d/%d, want %v/%v", h.min, h.max, all[0], all[len(all)-1])
	}
	var m hist
	m.merge(&h)
	m.merge(&h)
	if m.n != 2*h.n || m.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merge: n %d, p50 %v vs %v", m.n, m.quantile(0.5), h.quantile(0.5))
	}
}

func TestParseSSE(t *testing.T) {
	body := []byte("id: 1\nretry: 2000\ndata: \n\n: keep-alive\n\n" +
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\r\ndata: \"id\":7,\"result\":{\"content\":[]}}\r\n\r\n")
	a, err := parseSSE(body, 7)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.msg.Result) != `{"content":[]}` || a.notes != 2 || !a.sse {
		t.Errorf("got %+v", a)
	}
	if _, err := parseSSE(body, 8); err == nil {
		t.Error("no error for a missing answer")
	}
	// The last event needs no trailing blank line.
	if a, err := parseSSE([]byte(`data: {"id":3,"error":{"code":-32602,"message":"x"}}`), 3); err != nil || a.msg.Error == nil || a.msg.Error.Code != -32602 {
		t.Errorf("got %+v, %v", a, err)
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--mode", "call,mixed", "--url", "http://127.0.0.1:1/mcp, http://127.0.0.1:2/mcp",
		"--mix", "call=1,cancel=2", "--cpu", "tg=12"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.urls) != 2 || c.mixTotal != 3 || c.mix[opCancel] != 2 || c.cpu[0] != (namedPID{"tg", 12}) {
		t.Errorf("got %+v", c)
	}
	for _, bad := range [][]string{{"--mode", "nope"}, {"--url", "ftp://x"}, {"--mix", "bogus=1"}, {"--args", "[1]"},
		{"--mode", "mixed", "--mix", "call=0"}, {"-c", "0"}, {"--cpu", "srv=1+x"}, {"--redis", "nohost"}} {
		if _, err := parseFlags(bad, discard{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestHelpSaysDevTool: --help says what tgload is and that it is a
// development tool, before the flags.
func TestHelpSaysDevTool(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	if !strings.HasPrefix(help, "tgload: a load generator") || !strings.Contains(help, "A development tool of taskgate, not part of the product.") ||
		!strings.Contains(help, "-compare") {
		t.Errorf("--help:\n%s", help)
	}
}

// TestServerSideFlags: --cpu sums a name's processes; --redis names servers.
func TestServerSideFlags(t *testing.T) {
	c, err := parseFlags([]string{"--cpu", "srv=1+2,srv=3,peer=4", "--redis", "srv=127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []namedPID{{"srv", 1}, {"srv", 2}, {"srv", 3}, {"peer", 4}}
	if !slices.Equal(c.cpu, want) || len(c.redis) != 1 || c.redis[0] != (namedAddr{"srv", "127.0.0.1:1"}) {
		t.Errorf("cpu %v redis %v", c.cpu, c.redis)
	}
	self := os.Getpid()
	for x := 0; readCPU([]namedPID{{"a", self}})["a"] == 0; x++ { // use a clock tick of CPU
		_ = strings.Repeat("x", x%4096)
	}
	one := readCPU([]namedPID{{"a", self}})["a"]
	two := readCPU([]namedPID{{"a", self}, {"a", self}})["a"]
	if one <= 0 || two < 2*one {
		t.Errorf("readCPU of one process %v, of it twice %v: want the sum", one, two)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=300,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=20,usec=40,usec_per_call=2.00\r\ncmdstat_info:calls=5,usec=500\r\ncmdstat_config|resetstat:calls=1,usec=9\r\n"
	got := parseCommandStats(info)
	if want := (redisCounts{Calls: 30, Usec: 340, EvalUsec: 300}); got != want {
		t.Errorf("parseCommandStats = %+v, want %+v", got, want)
	}
}
