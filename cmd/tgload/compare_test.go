package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestParseCompare(t *testing.T) {
	got, err := parseCompare("direct=http://127.0.0.1:1/mcp, http://127.0.0.1:2/mcp?x=y ,tg=https://h/mcp", []string{era2025})
	if err != nil {
		t.Fatal(err)
	}
	want := []compareTarget{{"direct", "http://127.0.0.1:1/mcp", era2025}, {"t2", "http://127.0.0.1:2/mcp?x=y", era2025}, {"tg", "https://h/mcp", era2025}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("target %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"a=http://h/mcp", "a=http://h/mcp,a=http://i/mcp", "a=ftp://h,b=http://i/mcp", ""} {
		if _, err := parseCompare(bad, []string{era2025}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := parseFlags([]string{"--compare", "a=http://h/mcp,b=http://i/mcp", "--url", "http://j/mcp"}, discard{}); err == nil {
		t.Error("--compare with --url: no error")
	}
	if _, err := parseFlags([]string{"--compare", "a=http://h/mcp,b=http://i/mcp", "--rounds", "0"}, discard{}); err == nil {
		t.Error("--rounds 0: no error")
	}
	c, err := parseFlags([]string{"--compare", "a=http://h/mcp,b=http://i/mcp", "--rounds", "4"}, discard{})
	if err != nil || len(c.compare) != 2 || c.rounds != 4 {
		t.Errorf("got %+v, %v", c, err)
	}
}

func TestRoundOrder(t *testing.T) {
	// Every endpoint runs once per round, and each is first once in n rounds.
	first := map[int]int{}
	for r := range 6 {
		o := roundOrder(r, 3)
		seen := map[int]bool{}
		for _, i := range o {
			seen[i] = true
		}
		if len(seen) != 3 {
			t.Errorf("round %d: order %v", r, o)
		}
		first[o[0]]++
	}
	if first[0] != 2 || first[1] != 2 || first[2] != 2 {
		t.Errorf("first positions %v, want 2 each", first)
	}
}

func TestSummarize(t *testing.T) {
	targets := []compareTarget{{"direct", "u1", era2025}, {"proxy", "u2", era2025}}
	run := func(rps, p50, p99, cpu float64) *result {
		return &result{Concurrency: 4, DurationS: 2, RPS: rps, P50ms: p50, P99ms: p99, CPU: map[string]float64{"px": cpu}}
	}
	runs := [][]*result{
		{run(1000, 1, 5, 0), run(900, 1.2, 5.5, 0.09)},  // ratio 0.9
		{run(2000, 1, 4, 0), run(1000, 1.5, 6, 0.1)},    // 0.5
		{run(1000, 2, 6, 0), run(800, 2.1, 6.2, 0.08)},  // 0.8
		{run(1000, 1, 5, 0), run(950, 1.1, 5.3, 0.095)}, // 0.95
	}
	runs[3][1].Errors = 2
	s := summarize("call", targets, runs)
	if s.Rounds != 4 || s.Concurrency != 4 || s.RoundS != 2 || len(s.Targets) != 2 {
		t.Fatalf("got %+v", s)
	}
	b, p := s.Targets[0], s.Targets[1]
	if b.RPS != 1000 || b.Ratio != 0 || b.Errors != 0 {
		t.Errorf("baseline %+v", b)
	}
	if p.RPS != 925 || p.Errors != 2 {
		t.Errorf("proxy rps %v errors %d, want 925, 2", p.RPS, p.Errors)
	}
	// Ratios pair runs of the same round: 0.5, 0.8, 0.9, 0.95.
	if p.Ratio != 0.85 || p.RatioMin != 0.5 || p.RatioMax != 0.95 {
		t.Errorf("ratio %v (%v-%v), want 0.85 (0.5-0.95)", p.Ratio, p.RatioMin, p.RatioMax)
	}
	if p.Pooled != round3(3650.0/5000) {
		t.Errorf("pooled %v, want %v", p.Pooled, round3(3650.0/5000))
	}
	// Added p50 per round: 0.2, 0.5, 0.1, 0.1; p99: 0.5, 2, 0.2, 0.3.
	if p.AddedP50ms != 0.15 || p.AddedP99ms != 0.4 {
		t.Errorf("added p50 %v p99 %v, want 0.15, 0.4", p.AddedP50ms, p.AddedP99ms)
	}
	// CPU per request: 100 us in every round.
	if p.CPUus["px"] != 100 {
		t.Errorf("cpu %v, want px 100 us", p.CPUus)
	}
	var out bytes.Buffer
	s.print(&out, false)
	if !strings.Contains(out.String(), "ratio=0.850") || !strings.Contains(out.String(), "px:100") {
		t.Errorf("text output:\n%s", out.String())
	}
	out.Reset()
	s.print(&out, true)
	var back compareSummary
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Targets[1].Ratio != 0.85 || len(back.Runs) != 4 {
		t.Errorf("json output %v: %s", err, out.String())
	}
}

// TestCompareRuns runs a comparison against two go-sdk MCP servers, one
// whose echo tool takes 5 ms longer: the slower one must come out with a
// ratio well under 1 and the added latency must show the delay.
func TestCompareRuns(t *testing.T) {
	fast, slow := echoServer(t, 0), echoServer(t, 5*time.Millisecond)
	cfg, err := parseFlags([]string{"--compare", "fast=" + fast + ",slow=" + slow, "--rounds", "2",
		"--duration", "300ms", "--warmup", "50ms", "-c", "2"}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	s, err := runCompare(cfg, "call", make(chan struct{}), &progress)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != 2 || strings.Count(progress.String(), "round") != 2 {
		t.Fatalf("runs %d, progress:\n%s", len(s.Runs), progress.String())
	}
	f, sl := s.Targets[0], s.Targets[1]
	if f.Errors != 0 || sl.Errors != 0 || f.RPS == 0 || sl.RPS == 0 {
		t.Fatalf("targets %+v", s.Targets)
	}
	for r, round := range s.Runs {
		if round[0].Label != "fast" || round[1].Label != "slow" || round[0].Targets[0] != fast {
			t.Errorf("round %d not in --compare order: %q %q", r, round[0].Label, round[1].Label)
		}
	}
	// Every slow call waits 5 ms, whatever the machine's load: its median
	// latency cannot be below that. (Comparing it with the fast target's
	// figures would be a timing assertion: on a loaded machine the fast
	// target can be as slow as the slow one.)
	if sl.P50ms < 5 {
		t.Errorf("slow: p50 %.3f ms; want >= 5", sl.P50ms)
	}
	// The ratio is the median of the per-round ratios against the baseline.
	var ratios []float64
	for _, round := range s.Runs {
		ratios = append(ratios, round[1].RPS/round[0].RPS)
	}
	if want := median(ratios); math.Abs(sl.Ratio-want) > 0.0005 {
		t.Errorf("slow: ratio %.4f; want the median of the rounds' ratios %.4f (rounded to 3 places)", sl.Ratio, want)
	}
}

// echoServer serves a go-sdk MCP server with an echo tool that waits delay.
func echoServer(t *testing.T, delay time.Duration) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "compare-test", Version: "0"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}
