package main

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

// readmeFlagRow is one row of the README's flags table.
type readmeFlagRow struct {
	line          int
	env, def, use string
}

// readmeFlags reads the table under the "## Flags" heading of this command's README: flag
// name (without "--") to its row.
func readmeFlags(t *testing.T) map[string]readmeFlagRow {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]readmeFlagRow{}
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Flags"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 4 {
			t.Fatalf("README.md:%d: a flags row with %d cells: %s", i+1, len(cells), line)
		}
		name := strings.TrimPrefix(strings.Trim(strings.TrimSpace(cells[0]), "`"), "--")
		if _, dup := rows[name]; dup {
			t.Errorf("README.md:%d: --%s has a second row", i+1, name)
		}
		rows[name] = readmeFlagRow{line: i + 1, env: strings.Trim(strings.TrimSpace(cells[1]), "`"),
			def: strings.Trim(strings.TrimSpace(cells[2]), "`"), use: cells[3]}
	}
	if len(rows) == 0 {
		t.Fatal("README.md: no flags table under \"## Flags\"")
	}
	return rows
}

// noDefault are the words the README uses for a flag without a default
// value (its zero value, empty).
var noDefault = map[string]bool{"empty": true, "none": true, "(required)": true,
	"taskgate's": true, "shared through Redis": true}

// readmeDefaultIs reports whether the README's default cell states the
// flag's default value.
func readmeDefaultIs(f *flag.Flag, cell string) bool {
	if f.DefValue == "" || f.DefValue == "[]" {
		return noDefault[cell]
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			c, err := time.ParseDuration(cell)
			return err == nil && c == d
		}
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if d, ok := g.Get().(sizeValue); ok {
			c, err := parseSize(cell)
			return err == nil && c == int(d)
		}
	}
	return cell == f.DefValue
}

// TestReadmeFlagsTable: the README's flags table has one row per flag, with
// the flag's environment variable and its default (the one the flag set
// takes from packages proxy and proxy/stdio). A default changed in code and
// not in the README, or the reverse, fails here.
func TestReadmeFlagsTable(t *testing.T) {
	rows := readmeFlags(t)
	fs := newFlagSet(&options{})
	fs.VisitAll(func(f *flag.Flag) {
		r, ok := rows[f.Name]
		if !ok {
			t.Errorf("README: no row for --%s (default %q)", f.Name, f.DefValue)
			return
		}
		delete(rows, f.Name)
		if r.env != envName(f.Name) {
			t.Errorf("README.md:%d: --%s: env %q, want %q", r.line, f.Name, r.env, envName(f.Name))
		}
		if !readmeDefaultIs(f, r.def) {
			t.Errorf("README.md:%d: --%s: default %q, but the flag's is %q", r.line, f.Name, r.def, f.DefValue)
		}
	})
	for name, r := range rows {
		t.Errorf("README.md:%d: a row for --%s, which taskgate does not have", r.line, name)
	}
}

// TestReadmeDefaultCheck: the comparison the table test relies on tells a
// wrong default from a right one.
func TestReadmeDefaultCheck(t *testing.T) {
	fs := newFlagSet(&options{})
	for _, c := range []struct {
		flag, cell string
		want       bool
	}{
		{"lease", "15s", true}, {"lease", "15m", false}, {"stream-max-lifetime", "1h", true},
		{"max-body-size", "4 MiB", true}, {"max-body-size", "32 MiB", false},
		{"task-rate", "100", true}, {"task-rate", "10", false},
		{"listen", "127.0.0.1:8080", true}, {"listen", "127.0.0.1:8081", false},
		{"direct-io", "true", true}, {"direct-io", "false", false},
		{"redis", "empty", true}, {"redis", "redis://localhost:6379", false},
		{"upstream-env", "none", true},
	} {
		if got := readmeDefaultIs(fs.Lookup(c.flag), c.cell); got != c.want {
			t.Errorf("--%s with README default %q: %v, want %v", c.flag, c.cell, got, c.want)
		}
	}
}
