package main

// A mode's result and how it is printed (text or JSON).

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// result is one mode's outcome.
type result struct {
	Mode        string             `json:"mode"`
	Era         string             `json:"era,omitempty"` // the 2026 wire's version; empty: 2025-11-25
	Label       string             `json:"label,omitempty"`
	Targets     []string           `json:"targets"`
	Concurrency int                `json:"concurrency"`
	DurationS   float64            `json:"duration_s"`
	Requests    uint64             `json:"n"`
	RPS         float64            `json:"rps"`
	P50ms       float64            `json:"p50_ms"`
	P90ms       float64            `json:"p90_ms"`
	P99ms       float64            `json:"p99_ms"`
	MaxMs       float64            `json:"max_ms"`
	MeanMs      float64            `json:"mean_ms"`
	Errors      uint64             `json:"errors"`
	ErrorKinds  map[string]uint64  `json:"error_kinds,omitempty"`
	LastError   string             `json:"last_error,omitempty"`
	Ops         map[string]opStats `json:"ops,omitempty"`
	StreamNotes uint64             `json:"stream_notifications,omitempty"`
	Inline      uint64             `json:"inline_results,omitempty"` // 2026 task calls answered before becoming tasks
	CPU         map[string]float64 `json:"cpu_cores,omitempty"`
	// Redis is each --redis server's commands and command time per
	// operation (an iteration of the mode) over the window.
	Redis map[string]redisCounts `json:"redis_per_op,omitempty"`
}

type opStats struct {
	N     uint64  `json:"n"`
	RPS   float64 `json:"rps"`
	P50ms float64 `json:"p50_ms"`
	P90ms float64 `json:"p90_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

func (r *result) print(out io.Writer, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(out, "%s\n", b)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%s", r.Mode)
	if r.Era != "" {
		fmt.Fprintf(&b, " era=%s", r.Era)
	}
	if r.Label != "" {
		fmt.Fprintf(&b, " label=%s", r.Label)
	}
	if len(r.Targets) > 1 {
		fmt.Fprintf(&b, " targets=%d", len(r.Targets))
	}
	fmt.Fprintf(&b, " c=%d dur=%.0fs n=%d rps=%.1f p50=%s p90=%s p99=%s max=%s errors=%d",
		r.Concurrency, r.DurationS, r.Requests, r.RPS, fmtMs(r.P50ms), fmtMs(r.P90ms), fmtMs(r.P99ms), fmtMs(r.MaxMs), r.Errors)
	if len(r.CPU) > 0 {
		fmt.Fprintf(&b, " cpu=%s", fmtNamed(r.CPU, 2))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Redis)) {
		v := r.Redis[k]
		fmt.Fprintf(&b, " redis[%s]=%.1f cmds/op %.1f us/op (evalsha %.1f)", k, v.Calls, v.Usec, v.EvalUsec)
	}
	fmt.Fprintln(out, b.String())
	names := make([]string, 0, len(r.Ops))
	for k := range r.Ops {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := opByName(names[i])
		b, _ := opByName(names[j])
		return a < b
	})
	for _, k := range names {
		o := r.Ops[k]
		fmt.Fprintf(out, "  op=%s n=%d rps=%.1f p50=%s p90=%s p99=%s max=%s\n",
			k, o.N, o.RPS, fmtMs(o.P50ms), fmtMs(o.P90ms), fmtMs(o.P99ms), fmtMs(o.MaxMs))
	}
	if r.Errors > 0 {
		keys := make([]string, 0, len(r.ErrorKinds))
		for k := range r.ErrorKinds {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", k, r.ErrorKinds[k])
		}
		fmt.Fprintf(out, "  errors: %s; last: %.300s\n", strings.Join(parts, " "), r.LastError)
	}
	if r.Inline > 0 {
		fmt.Fprintf(out, "  task calls answered inline (ended before they became tasks): %d\n", r.Inline)
	}
	if r.StreamNotes > 0 {
		fmt.Fprintf(out, "  stream notifications received: %d\n", r.StreamNotes)
	}
}

// fmtNamed formats m as name:value pairs sorted by name, values with prec
// decimals.
func fmtNamed(m map[string]float64, prec int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%.*f", k, prec, m[k])
	}
	return strings.Join(parts, ",")
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}
