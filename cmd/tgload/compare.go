package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// A side-by-side comparison (--compare): the same mode against several
// endpoints, e.g. an upstream direct and through taskgate, in alternating
// rounds. On a shared or noisy machine throughput drifts by tens of percent
// over minutes; runs of a few seconds taken back to back see nearly the same
// machine, so each round's ratio to the first endpoint (the baseline) is
// meaningful where two long runs minutes apart are not. The order rotates
// every round so that no endpoint always runs first.

// errInterrupted ends a comparison stopped by a signal.
var errInterrupted = errors.New("interrupted")

// compareTarget is one endpoint of --compare, on one wire (era).
type compareTarget struct {
	name, url string
	era       string // era2025 or era2026
}

// parseCompare parses --compare: a comma list of name=URL (a bare URL is
// named by its position). With more than one era, every endpoint becomes
// one target per era, named name/era, in endpoint order, then era order:
// one endpoint and --era 2025,2026 compare the two wires of one server.
func parseCompare(s string, eras []string) ([]compareTarget, error) {
	var out []compareTarget
	for i, item := range splitList(s) {
		name, u, ok := strings.Cut(item, "=")
		if !ok || strings.Contains(name, "/") {
			name, u = fmt.Sprintf("t%d", i+1), item
		}
		name, u = strings.TrimSpace(name), strings.TrimSpace(u)
		if err := checkURL(u); err != nil {
			return nil, fmt.Errorf("--compare %q: %w", item, err)
		}
		if slices.ContainsFunc(out, func(t compareTarget) bool { return t.name == name }) {
			return nil, fmt.Errorf("--compare: name %q twice", name)
		}
		out = append(out, compareTarget{name: name, url: u, era: eras[0]})
	}
	if len(eras) > 1 {
		byEra := make([]compareTarget, 0, len(out)*len(eras))
		for _, t := range out {
			for _, e := range eras {
				byEra = append(byEra, compareTarget{name: t.name + "/" + strings.TrimSuffix(e, "-07-28"), url: t.url, era: e})
			}
		}
		out = byEra
	}
	if len(out) < 2 {
		return nil, errors.New("--compare: want at least two name=URL endpoints, or one with --era 2025,2026")
	}
	return out, nil
}

// roundOrder is the order in which round r (from 0) visits n endpoints.
func roundOrder(r, n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (r + i) % n
	}
	return o
}

// compareSummary is the outcome of a comparison for one mode.
type compareSummary struct {
	Mode        string          `json:"mode"`
	Concurrency int             `json:"concurrency"`
	Rounds      int             `json:"rounds"`
	RoundS      float64         `json:"round_s"`
	Targets     []targetSummary `json:"targets"`
	// Runs holds every run: Runs[round][target], targets in --compare order.
	Runs [][]*result `json:"runs,omitempty"`
}

// targetSummary gives medians over the rounds; the Vs fields compare with
// the baseline in the same round, then take the median.
type targetSummary struct {
	Name   string  `json:"name"`
	URL    string  `json:"url"`
	RPS    float64 `json:"rps"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	Errors uint64  `json:"errors"`
	// Inline counts the 2026 task calls answered with their result before
	// they became tasks, over all rounds.
	Inline uint64 `json:"inline_results,omitempty"`
	// CPUus is each --cpu process's (and tgload's) CPU time per request,
	// in microseconds; processes that used none are left out.
	CPUus map[string]float64 `json:"cpu_us_per_request,omitempty"`
	// Redis is each --redis server's median commands and command time per
	// request over the rounds (servers this target does not use are left out).
	Redis map[string]redisCounts `json:"redis_per_request,omitempty"`
	// For targets after the baseline:
	Ratio      float64 `json:"ratio,omitempty"`        // median of rps / baseline rps
	RatioMin   float64 `json:"ratio_min,omitempty"`    // lowest round
	RatioMax   float64 `json:"ratio_max,omitempty"`    // highest round
	Pooled     float64 `json:"ratio_pooled,omitempty"` // all requests / all baseline requests
	AddedP50ms float64 `json:"added_p50_ms,omitempty"` // median of p50 - baseline p50
	AddedP99ms float64 `json:"added_p99_ms,omitempty"` // median of p99 - baseline p99
}

// summarize computes the per-target figures of runs[round][target].
func summarize(mode string, targets []compareTarget, runs [][]*result) compareSummary {
	s := compareSummary{Mode: mode, Rounds: len(runs), Runs: runs}
	if len(runs) > 0 && len(runs[0]) > 0 {
		s.Concurrency, s.RoundS = runs[0][0].Concurrency, runs[0][0].DurationS
	}
	for ti, t := range targets {
		ts := targetSummary{Name: t.name, URL: t.url}
		var rps, p50, p99, ratio, dp50, dp99 []float64
		cpu := map[string][]float64{}
		rcalls, rusec, reval := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		var sum, baseSum float64
		for _, round := range runs {
			r, b := round[ti], round[0]
			rps, p50, p99 = append(rps, r.RPS), append(p50, r.P50ms), append(p99, r.P99ms)
			ts.Errors += r.Errors
			ts.Inline += r.Inline
			for k, v := range r.Redis {
				rcalls[k], rusec[k], reval[k] = append(rcalls[k], v.Calls), append(rusec[k], v.Usec), append(reval[k], v.EvalUsec)
			}
			for k, v := range r.CPU {
				if r.RPS > 0 {
					cpu[k] = append(cpu[k], v/r.RPS*1e6)
				}
			}
			if ti > 0 && b.RPS > 0 {
				ratio = append(ratio, r.RPS/b.RPS)
				dp50, dp99 = append(dp50, r.P50ms-b.P50ms), append(dp99, r.P99ms-b.P99ms)
				sum, baseSum = sum+r.RPS, baseSum+b.RPS
			}
		}
		ts.RPS, ts.P50ms, ts.P99ms = median(rps), median(p50), median(p99)
		if len(cpu) > 0 {
			ts.CPUus = map[string]float64{}
			for k, v := range cpu {
				if m := median(v); m >= 0.5 { // not a process this target runs through
					ts.CPUus[k] = round2(m)
				}
			}
		}
		for k, v := range rcalls {
			if m := median(v); m >= 0.5 {
				if ts.Redis == nil {
					ts.Redis = map[string]redisCounts{}
				}
				ts.Redis[k] = redisCounts{Calls: round2(m), Usec: round2(median(rusec[k])), EvalUsec: round2(median(reval[k]))}
			}
		}
		if len(ratio) > 0 {
			ts.Ratio, ts.RatioMin, ts.RatioMax = round3(median(ratio)), round3(slices.Min(ratio)), round3(slices.Max(ratio))
			ts.Pooled = round3(sum / baseSum)
			ts.AddedP50ms, ts.AddedP99ms = round3(median(dp50)), round3(median(dp99))
		}
		s.Targets = append(s.Targets, ts)
	}
	return s
}

// median of v (the mean of the middle two for an even count); 0 if empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// runCompare runs mode against every --compare target for cfg.rounds
// rounds. Each run is a full runMode (own sessions, warm-up, window); a
// line per round goes to progress.
func runCompare(cfg *config, mode string, stop <-chan struct{}, progress io.Writer) (compareSummary, error) {
	runs := make([][]*result, 0, cfg.rounds)
	for r := range cfg.rounds {
		round := make([]*result, len(cfg.compare))
		var line strings.Builder
		fmt.Fprintf(&line, "tgload: %s round %d/%d:", mode, r+1, cfg.rounds)
		for _, ti := range roundOrder(r, len(cfg.compare)) {
			t := cfg.compare[ti]
			c := *cfg
			c.urls, c.label, c.era = []string{t.url}, t.name, t.era
			res, err := runMode(&c, mode, stop)
			if err != nil {
				return compareSummary{}, fmt.Errorf("%s (%s): %w", t.name, t.url, err)
			}
			round[ti] = res
			fmt.Fprintf(&line, " %s %.0f/s", t.name, res.RPS)
			select {
			case <-stop:
				return compareSummary{}, errInterrupted
			default:
			}
		}
		runs = append(runs, round)
		fmt.Fprintln(progress, line.String())
	}
	return summarize(mode, cfg.compare, runs), nil
}

// print writes the summary as a table, or as one JSON object.
func (s compareSummary) print(out io.Writer, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(s)
		fmt.Fprintf(out, "%s\n", b)
		return
	}
	fmt.Fprintf(out, "mode=%s c=%d rounds=%d of %.0fs; medians over rounds, ratios and added latency against %s in the same round\n",
		s.Mode, s.Concurrency, s.Rounds, s.RoundS, s.Targets[0].Name)
	for i, t := range s.Targets {
		fmt.Fprintf(out, "  %-10s rps=%.1f p50=%s p99=%s errors=%d", t.Name, t.RPS, fmtMs(t.P50ms), fmtMs(t.P99ms), t.Errors)
		if i > 0 {
			fmt.Fprintf(out, " ratio=%.3f (rounds %.2f-%.2f, pooled %.3f) added p50=%+.3fms p99=%+.3fms",
				t.Ratio, t.RatioMin, t.RatioMax, t.Pooled, t.AddedP50ms, t.AddedP99ms)
		}
		if len(t.CPUus) > 0 {
			fmt.Fprintf(out, " cpu-us/req=%s", fmtNamed(t.CPUus, 0))
		}
		for _, k := range slices.Sorted(maps.Keys(t.Redis)) {
			v := t.Redis[k]
			fmt.Fprintf(out, " redis[%s]=%.1f cmds/req %.1f us/req (evalsha %.1f)", k, v.Calls, v.Usec, v.EvalUsec)
		}
		if t.Inline > 0 {
			fmt.Fprintf(out, " inline=%d", t.Inline)
		}
		fmt.Fprintln(out)
	}
}

// compareMain runs every mode as a comparison; it returns the exit code.
func compareMain(cfg *config, stop <-chan struct{}) int {
	failed := false
	for _, mode := range cfg.modes {
		s, err := runCompare(cfg, mode, stop, os.Stderr)
		if errors.Is(err, errInterrupted) {
			return 130
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "tgload: mode %s: %v\n", mode, err)
			return 1
		}
		s.print(os.Stdout, cfg.jsonOut)
		for _, t := range s.Targets {
			failed = failed || t.Errors > 0
		}
	}
	if failed {
		return 3
	}
	return 0
}
