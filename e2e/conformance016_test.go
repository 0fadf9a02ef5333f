package e2e

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// scenarioResult is one scenario's line of a run.sh summary.
type scenarioResult struct {
	passed, failed int
	rest           string // what follows the counts (other statuses, failed check ids)
}

// runConformanceScript runs a conformance run.sh against url (its default
// scenarios, or those named) and returns its per-scenario results and its
// output.
func runConformanceScript(t *testing.T, script, url, label string, scenarios ...string) (map[string]scenarioResult, string) {
	t.Helper()
	cmd := exec.Command(script, append([]string{url, label}, scenarios...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("%s %s: %v\n%s", script, url, err, out)
	}
	res := map[string]scenarioResult{}
	for _, line := range strings.Split(string(out), "\n") {
		m := conformanceLine.FindStringSubmatch(line)
		if m == nil || m[1] != label || m[2] == "total" {
			continue
		}
		p, _ := strconv.Atoi(m[3])
		f, _ := strconv.Atoi(m[4])
		res[m[2]] = scenarioResult{passed: p, failed: f, rest: strings.TrimPrefix(line, m[0])}
	}
	return res, string(out)
}

// TestConformance016Server runs the server scenarios of the 2025-era
// conformance suite (@modelcontextprotocol/conformance 0.1.16,
// e2e/testdata/conformance-0.1.16/run.sh) against legacy-mcp --everything
// alone and through taskgate, for both upstream eras. taskgate must not
// change any scenario's outcome: through it every scenario passes and
// fails exactly the checks it passes and fails without it. In front of the
// 2025-era upstream every check passes; the stateless 2026-era upstream
// cannot send requests to the client, so its sampling and elicitation
// scenarios fail with or without taskgate.
func TestConformance016Server(t *testing.T) {
	script := conformanceScript(t, "conformance-0.1.16")
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, append(slices.Clone(era.args), "--everything")...)
			gw := startTaskgate(t, up.URL, "--log-level", "warn")
			alone, aloneOut := runConformanceScript(t, script, up.URL, era.name+"-alone")
			through, throughOut := runConformanceScript(t, script, gw.URL, era.name+"-taskgate")
			t.Logf("conformance 0.1.16 server scenarios, upstream alone:\n%s\nthrough taskgate:\n%s", aloneOut, throughOut)
			if len(alone) == 0 {
				t.Fatalf("no scenario ran against the upstream alone")
			}
			passed, failed := 0, 0
			for s, a := range alone {
				g, ok := through[s]
				switch {
				case !ok:
					t.Errorf("%s: ran alone (%d passed, %d failed) but not through taskgate", s, a.passed, a.failed)
				case g != a:
					t.Errorf("%s: through taskgate %d passed, %d failed%s; alone %d passed, %d failed%s",
						s, g.passed, g.failed, g.rest, a.passed, a.failed, a.rest)
				}
				passed += g.passed
				failed += g.failed
			}
			for s := range through {
				if _, ok := alone[s]; !ok {
					t.Errorf("%s: ran through taskgate only", s)
				}
			}
			if era.name == "upstream2025" && failed > 0 {
				t.Errorf("through taskgate in front of the 2025-era upstream: %d checks failed, want none", failed)
			}
			t.Logf("%s through taskgate: %d scenarios, %d checks passed, %d failed", era.name, len(through), passed, failed)
		})
	}
}
