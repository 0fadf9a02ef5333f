package proxy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The glossary of cited IDs is GLOSSARY.md beside this file. TestGlossary
// keeps it and the citations in the module's Go and markdown files in step.

var (
	// citeRE finds a cited ID ("T-08") or range ("T-07..T-10").
	citeRE = regexp.MustCompile(`\b([A-Z])-([0-9]{1,3})\b(?:\.\.([A-Z])-([0-9]{1,3})\b)?`)
	// suffixRE finds the IDs cited by a name's suffix (TestX_E14_T34), and
	// suffixIDRE each of them.
	suffixRE   = regexp.MustCompile(`\b[A-Za-z]\w*?(?:_[A-Z][0-9]{2,3})+\b`)
	suffixIDRE = regexp.MustCompile(`_([A-Z])([0-9]{2,3})`)
	// defRE finds a glossary entry: a list item "- T-17, T-18: text".
	defRE = regexp.MustCompile(`^\s*- ((?:[A-Z]-[0-9]{2,3})(?:, [A-Z]-[0-9]{2,3})*):`)
	// idRE checks the form of one ID.
	idRE = regexp.MustCompile(`^[A-Z]-[0-9]{2,3}$`)
)

// citations returns the IDs src cites, ranges expanded, in order of
// appearance (with repeats). A malformed range ("T-10..Q-12", "T-12..T-10")
// is returned as its text, which is never a defined ID.
func citations(src string) []string {
	var ids []string
	for _, m := range citeRE.FindAllStringSubmatch(src, -1) {
		if m[3] == "" {
			ids = append(ids, m[1]+"-"+m[2])
			continue
		}
		from, _ := strconv.Atoi(m[2])
		to, _ := strconv.Atoi(m[4])
		if m[1] != m[3] || to < from || len(m[2]) != len(m[4]) {
			ids = append(ids, m[0])
			continue
		}
		for n := from; n <= to; n++ {
			ids = append(ids, fmt.Sprintf("%s-%0*d", m[1], len(m[2]), n))
		}
	}
	for _, name := range suffixRE.FindAllString(src, -1) {
		for _, m := range suffixIDRE.FindAllStringSubmatch(name, -1) {
			ids = append(ids, m[1]+"-"+m[2])
		}
	}
	return ids
}

// definitions returns the IDs the glossary in doc defines, in order (with
// repeats, so duplicates can be reported).
func definitions(doc string) []string {
	var ids []string
	for _, line := range strings.Split(doc, "\n") {
		if m := defRE.FindStringSubmatch(line); m != nil {
			ids = append(ids, strings.Split(m[1], ", ")...)
		}
	}
	return ids
}

// secondWire reports whether a file belongs to the MCP 2026-07-28 wire,
// where edge cases are M- IDs and an E- citation would mean the wrong list.
func secondWire(path string) bool {
	path = filepath.ToSlash(path)
	return strings.Contains(path, "/v20260728/")
}

// glossaryProblems checks the citations of files (path -> source) against
// the glossary source doc (whose own cross-references must be defined but
// do not count as uses). It returns one line per problem, sorted.
func glossaryProblems(doc string, files map[string]string) []string {
	var problems []string
	defined := map[string]bool{}
	for _, id := range definitions(doc) {
		if defined[id] {
			problems = append(problems, fmt.Sprintf("glossary: %s is defined twice", id))
		}
		defined[id] = true
	}
	used := map[string]bool{}
	for path, src := range files {
		seen := map[string]bool{}
		for _, id := range citations(src) {
			if seen[id] {
				continue
			}
			seen[id] = true
			used[id] = true
			switch {
			case !idRE.MatchString(id):
				problems = append(problems, fmt.Sprintf("%s: %q is not a well-formed ID or range (two or three digits, one series)", path, id))
			case !defined[id]:
				problems = append(problems, fmt.Sprintf("%s: %s is cited but not defined in the glossary (proxy/GLOSSARY.md)", path, id))
			}
			if strings.HasPrefix(id, "E-") && secondWire(path) {
				problems = append(problems, fmt.Sprintf("%s: %s is an edge case of the 2025-11-25 wire; the 2026-07-28 wire's are M- IDs", path, id))
			}
		}
	}
	refs := map[string]bool{}
	for _, id := range citations(doc) {
		refs[id] = true
	}
	for id := range refs {
		if !defined[id] && idRE.MatchString(id) {
			problems = append(problems, fmt.Sprintf("glossary: %s is referred to but not defined", id))
		}
	}
	for id := range defined {
		if !used[id] {
			problems = append(problems, fmt.Sprintf("glossary: %s is defined but cited nowhere; remove it", id))
		}
	}
	sort.Strings(problems)
	return problems
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// moduleGoFiles reads every .go and .md file of the module under root, skipping what
// the go command skips too (directories named testdata or vendor, or
// starting with "." or "_", such as e2e/.npm) and node_modules. Symbolic
// links are not followed.
func moduleGoFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".md")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestGlossary: every ID a Go or markdown file of the module cites is
// defined in GLOSSARY.md, every ID defined there is cited somewhere, and no
// file of the 2026-07-28 wire cites an E- ID.
func TestGlossary(t *testing.T) {
	root := moduleRoot(t)
	files := moduleGoFiles(t, root)
	doc, ok := files["proxy/GLOSSARY.md"]
	if !ok {
		t.Fatal("proxy/GLOSSARY.md not found")
	}
	delete(files, "proxy/GLOSSARY.md")
	delete(files, "proxy/glossary_test.go") // its samples are no citations
	if n := len(definitions(doc)); n < 100 {
		t.Fatalf("the glossary defines %d IDs; the parser no longer finds its entries", n)
	}
	for _, p := range glossaryProblems(doc, files) {
		t.Error(p)
	}
}

// TestGlossaryChecker: the checker reports each kind of problem, and
// recognises each form of citation.
func TestGlossaryChecker(t *testing.T) {
	if got, want := citations("x (T-07..T-09, E-14) TestY_Q12_H02 A-4 T-10..Q-12 X-01.. UTF-8"),
		[]string{"T-07", "T-08", "T-09", "E-14", "A-4", "T-10..Q-12", "X-01", "Q-12", "H-02"}; !slices.Equal(got, want) {
		t.Errorf("citations = %q, want %q", got, want)
	}
	doc := "# Glossary\n\n  - T-01, T-02: one.\n  - E-01: two (T-01).\n  - M-01: three (Q-99).\n  - T-01: again.\n"
	if got, want := definitions(doc), []string{"T-01", "T-02", "E-01", "M-01", "T-01"}; !slices.Equal(got, want) {
		t.Errorf("definitions = %q, want %q", got, want)
	}
	got := glossaryProblems(doc, map[string]string{
		"proxy/tasks.go":                "// T-01..T-02, E-01, H-07 and A-4",
		"proxy/wire/v20260728/tasks.go": "// E-01 and M-01",
	})
	want := []string{
		"glossary: Q-99 is referred to but not defined",
		"glossary: T-01 is defined twice",
		`proxy/tasks.go: "A-4" is not a well-formed ID or range (two or three digits, one series)`,
		"proxy/tasks.go: H-07 is cited but not defined in the glossary (proxy/GLOSSARY.md)",
		`proxy/wire/v20260728/tasks.go: E-01 is an edge case of the 2025-11-25 wire; the 2026-07-28 wire's are M- IDs`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = glossaryProblems(doc, map[string]string{"cmd/x/main.go": "// T-02"})
	for _, id := range []string{"T-01", "E-01", "M-01"} {
		if !slices.Contains(got, "glossary: "+id+" is defined but cited nowhere; remove it") {
			t.Errorf("an unused %s is not reported: %q", id, got)
		}
	}
}
