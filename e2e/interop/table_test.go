package interop

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

const (
	beginMarker = "<!-- interop matrix: written by TestInterop (INTEROP_UPDATE=1 to rewrite) -->"
	endMarker   = "<!-- end of the interop matrix -->"
)

// matrixTable renders the results: a row per server and transport, a
// column per client and era; then the counts per check.
func matrixTable(results []cellResult) string {
	var rows, cols []string
	seen := map[string]bool{}
	for _, s := range servers() {
		if !seen[s.row()] {
			seen[s.row()] = true
			rows = append(rows, s.row())
		}
	}
	for _, c := range clients() {
		cols = append(cols, c.col())
	}
	cell := map[string]map[string]verdict{}
	for _, r := range results {
		cell[r.server+"|"+r.client+" ("+r.era+")"] = r.verdicts
	}
	var b strings.Builder
	b.WriteString("| server (transport) | " + strings.Join(cols, " | ") + " |\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	cells := map[string]int{}
	counts := map[string]map[string]int{}
	for _, k := range checks {
		counts[k] = map[string]int{}
	}
	for _, row := range rows {
		b.WriteString("| " + row + " |")
		for _, col := range cols {
			v, ran := cell[row+"|"+col]
			if !ran {
				b.WriteString(" – |")
				continue
			}
			var failed []string
			passed := 0
			for _, k := range checks {
				counts[k][v[k].state]++
				switch v[k].state {
				case "fail":
					failed = append(failed, k)
				case "pass":
					passed++
				}
			}
			switch {
			case len(failed) > 0:
				cells["fail"]++
				fmt.Fprintf(&b, " ✗ %s (%d ✓) |", strings.Join(failed, ", "), passed)
			case passed > 0:
				cells["pass"]++
				fmt.Fprintf(&b, " ✓ %d |", passed)
			default:
				cells["n/a"]++
				b.WriteString(" n/a |")
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n%d cells: %d pass, %d fail, %d not applicable.\n\n", len(results), cells["pass"], cells["fail"], cells["n/a"])
	b.WriteString("| check | pass | fail | n/a |\n|---|---|---|---|\n")
	for _, k := range checks {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", k, counts[k]["pass"], counts[k]["fail"], counts[k]["n/a"])
	}
	return b.String()
}

// checkReadme compares the table with the one in README.md, or rewrites it
// with -update or INTEROP_UPDATE=1.
func checkReadme(t *testing.T, table string) {
	const path = "README.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		t.Fatalf("%s has no matrix markers", path)
	}
	old := strings.TrimSpace(s[i+len(beginMarker) : j])
	if old == strings.TrimSpace(table) {
		return
	}
	if *update || os.Getenv("INTEROP_UPDATE") == "1" {
		s = s[:i+len(beginMarker)] + "\n" + table + "\n" + s[j:]
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rewritten", path)
		return
	}
	t.Errorf("the matrix in e2e/interop/%s is not this run's (INTEROP_UPDATE=1 rewrites it):\n--- README\n%s\n--- this run\n%s", path, old, table)
}
