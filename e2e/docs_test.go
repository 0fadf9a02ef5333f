package e2e

// The repository's markdown files link to each other and to the code they
// describe. A moved file or a renamed heading breaks such a link silently;
// TestMarkdownLinks finds every broken one.

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLinkRE finds inline markdown links and images: [text](target) and
// ![alt](target). A target may carry a title ("…" after a space), dropped.
var mdLinkRE = regexp.MustCompile(`!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// mdFenceRE finds the start or end of a fenced code block.
var mdFenceRE = regexp.MustCompile("^\\s*(```|~~~)")

// repoMarkdown returns the repository's markdown files (relative, slash
// separated) below root, skipping .git, node_modules, testdata and
// directories the go command skips (leading "." or "_").
func repoMarkdown(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "node_modules" || name == "testdata" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasSuffix(name, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// mdAnchor is the anchor GitHub gives a heading: lower case, punctuation
// other than '-' and '_' dropped, spaces turned into '-'.
func mdAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdDoc is what the link check needs of one markdown file: its anchors and
// its links with their line numbers.
type mdDoc struct {
	anchors map[string]bool
	links   []mdLink
}

type mdLink struct {
	line   int
	target string
}

// parseMarkdown reads headings and links outside fenced code blocks and
// inline code spans.
func parseMarkdown(src string) mdDoc {
	d := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for i, line := range strings.Split(src, "\n") {
		if mdFenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			a := mdAnchor(strings.ReplaceAll(h, "`", ""))
			if n := seen[a]; n > 0 {
				d.anchors[a+"-"+itoa(n)] = true
			} else {
				d.anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range mdLinkRE.FindAllStringSubmatchIndex(line, -1) {
			if strings.Count(line[:m[0]], "`")%2 == 1 {
				continue // inside a code span
			}
			d.links = append(d.links, mdLink{line: i + 1, target: line[m[2]:m[3]]})
		}
	}
	return d
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// linkProblems returns one line per broken relative link of the docs
// (path -> source): a missing file or directory, or an anchor that names
// no heading of its markdown file. External links (with a scheme) and
// mail addresses are not checked.
func linkProblems(root string, docs map[string]string) []string {
	parsed := map[string]mdDoc{}
	for p, src := range docs {
		parsed[p] = parseMarkdown(src)
	}
	var problems []string
	for p, d := range parsed {
		for _, l := range d.links {
			tgt := l.target
			if strings.Contains(tgt, "://") || strings.HasPrefix(tgt, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(tgt, "#")
			resolved := p
			if file != "" {
				resolved = filepath.ToSlash(filepath.Join(filepath.Dir(p), file))
				if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
					problems = append(problems, p+":"+itoa(l.line)+": "+tgt+": no such file")
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			target, ok := parsed[resolved]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, resolved))
				if err != nil {
					problems = append(problems, p+":"+itoa(l.line)+": "+tgt+": "+err.Error())
					continue
				}
				target = parseMarkdown(string(b))
			}
			if !target.anchors[anchor] {
				problems = append(problems, p+":"+itoa(l.line)+": "+tgt+": no heading with that anchor")
			}
		}
	}
	return problems
}

// TestMarkdownLinks: every relative link of every markdown file of the
// repository reaches an existing file, and every #anchor a heading.
func TestMarkdownLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := repoMarkdown(t, root)
	if len(files) < 3 {
		t.Fatalf("found %d markdown files under %s; the walk is broken", len(files), root)
	}
	docs := map[string]string{}
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
		links += len(parseMarkdown(string(b)).links)
	}
	if links == 0 {
		t.Fatal("no links found; the parser is broken")
	}
	for _, p := range linkProblems(root, docs) {
		t.Error(p)
	}
}

// TestMarkdownLinkChecker: the checker reports a missing file and a missing
// anchor, and accepts a good link of each kind.
func TestMarkdownLinkChecker(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := "# Other doc\n\n## Flags and `env`\n\n## Flags and `env`\n"
	if err := os.WriteFile(filepath.Join(root, "sub", "OTHER.md"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{
		"README.md": "# Top\n\n## A section\n\n" +
			"[ok](sub/OTHER.md) [ok](sub/OTHER.md#flags-and-env) [ok](sub/OTHER.md#flags-and-env-1) [ok](#a-section)\n" +
			"[ext](https://example.com/x) `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n" +
			"[bad](missing.md) [bad](sub/OTHER.md#nope) [bad](#nope)\n",
		"sub/OTHER.md": other,
	}
	got := linkProblems(root, docs)
	want := map[string]bool{
		"README.md:10: missing.md: no such file":                       true,
		"README.md:10: sub/OTHER.md#nope: no heading with that anchor": true,
		"README.md:10: #nope: no heading with that anchor":             true,
	}
	if len(got) != len(want) {
		t.Errorf("problems = %q, want %d of them", got, len(want))
	}
	for _, p := range got {
		if !want[p] {
			t.Errorf("unexpected problem %q", p)
		}
	}
}
