package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// OPERATING.md stays true to the code: its relative links resolve, and
// every --flag it names is a flag of taskgate or of `taskgate tasks`.
func TestOperatingDoc(t *testing.T) {
	b, err := os.ReadFile("OPERATING.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, m := range regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`).FindAllStringSubmatch(doc, -1) {
		if strings.Contains(m[1], "://") {
			continue
		}
		if _, err := os.Stat(filepath.FromSlash(m[1])); err != nil {
			t.Errorf("OPERATING.md links to %s: %v", m[1], err)
		}
	}
	known := map[string]bool{}
	o := &options{}
	newFlagSet(o).VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	fs, _ := tasksFlags("", &tasksCLI{}, new(string), new(string), &listFlags{})
	fs.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	for _, m := range regexp.MustCompile("`--([a-z][a-z-]*)").FindAllStringSubmatch(doc, -1) {
		if !known[m[1]] {
			t.Errorf("OPERATING.md names --%s, which is not a flag", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`\[--([a-z][a-z-]*)`).FindAllStringSubmatch(doc, -1) {
		if !known[m[1]] {
			t.Errorf("OPERATING.md names --%s, which is not a flag", m[1])
		}
	}
}
