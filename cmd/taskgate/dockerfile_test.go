package main

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pinnedImage is an image reference with a tag kept for readers and the
// sha256 digest that decides what is pulled: name:tag@sha256:<64 hex>.
var pinnedImage = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?/?[a-z0-9._/-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*@sha256:[0-9a-f]{64}$`)

// dockerfileBases returns the base image of every FROM line of the
// Dockerfile, with ${ARG} references replaced by the ARG's default, and
// the stage names defined before each FROM (a FROM naming an earlier
// stage builds on it and pulls nothing).
func dockerfileBases(t *testing.T, text string) (bases []string, stages map[string]bool) {
	t.Helper()
	args := map[string]string{}
	stages = map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "ARG":
			name, def, _ := strings.Cut(f[1], "=")
			args[name] = def
		case "FROM":
			img := f[1]
			if strings.HasPrefix(img, "--") { // --platform=...
				if len(f) < 3 {
					t.Fatalf("FROM line without an image: %q", sc.Text())
				}
				img, f = f[2], f[1:]
			}
			img = os.Expand(img, func(name string) string {
				v, ok := args[name]
				if !ok {
					t.Errorf("FROM %s: ARG %s has no default before it", f[1], name)
				}
				return v
			})
			bases = append(bases, img)
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				stages[strings.ToLower(f[3])] = true
			}
		}
	}
	return bases, stages
}

// Every base image the Dockerfile pulls (a FROM line, directly or through
// an ARG's default) is pinned by a sha256 digest, so the same commit
// builds on the same bases.
func TestDockerfilePinned(t *testing.T) {
	text, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	bases, stages := dockerfileBases(t, string(text))
	if len(bases) == 0 {
		t.Fatal("no FROM line in the Dockerfile")
	}
	pulled := 0
	for _, b := range bases {
		if stages[strings.ToLower(b)] || b == "scratch" {
			continue
		}
		pulled++
		if !pinnedImage.MatchString(b) {
			t.Errorf("base image %q is not pinned: write it as name:tag@sha256:<64 hex digits> (crane digest name:tag)", b)
		}
	}
	if pulled == 0 {
		t.Error("the Dockerfile pulls no base image; the test reads it wrong")
	}
}

func TestPinnedImagePattern(t *testing.T) {
	digest := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		image string
		want  bool
	}{
		{image: "golang:1.26.8-bookworm@sha256:" + digest, want: true},
		{image: "gcr.io/distroless/static-debian12:nonroot@sha256:" + digest, want: true},
		{image: "localhost:5000/x/y:v1@sha256:" + digest, want: true},
		{image: "golang:1.26.8-bookworm", want: false},
		{image: "golang@sha256:" + digest, want: false}, // no tag for readers
		{image: "golang:1.26.8-bookworm@sha256:" + digest[:63], want: false},
		{image: "golang:1.26.8-bookworm@sha256:" + strings.ToUpper(digest), want: false},
		{image: "golang:1.26.8-bookworm@sha512:" + digest, want: false},
		{image: "", want: false},
	} {
		if got := pinnedImage.MatchString(tc.image); got != tc.want {
			t.Errorf("pinnedImage.MatchString(%q) = %v, want %v", tc.image, got, tc.want)
		}
	}
}

// dockerIgnored reports whether the .dockerignore patterns exclude p (a
// slash-separated path from the context root): the last pattern matching
// p or one of its parent directories decides, "!" patterns re-include,
// and "**" matches any number of directories, as in Docker.
func dockerIgnored(patterns []string, p string) bool {
	ignored := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = path.Clean(strings.TrimPrefix(strings.TrimPrefix(pat, "!"), "/"))
		re := dockerPattern(pat)
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			if re.MatchString(q) {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

// dockerPattern compiles a .dockerignore pattern: filepath.Match syntax
// plus "**" for any number of path elements.
func dockerPattern(pat string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; c {
		case '*':
			if strings.HasPrefix(pat[i:], "**/") {
				b.WriteString("(.*/)?")
				i += 2
			} else if strings.HasPrefix(pat[i:], "**") {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// .dockerignore keeps every npm tree out of the build context: for each
// package.json in the repository (outside node_modules), the node_modules
// beside it is excluded, and so is one nested anywhere else.
func TestDockerignoreNodeModules(t *testing.T) {
	raw, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	var trees []string
	err = filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.Name() == "package.json" {
			rel, err := filepath.Rel("../..", filepath.Dir(p))
			if err != nil {
				return err
			}
			trees = append(trees, path.Join(filepath.ToSlash(rel), "node_modules"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(trees) == 0 {
		t.Fatal("no package.json found in the repository; the test reads it wrong")
	}
	trees = append(trees, "node_modules", "cmd/x/y/node_modules/pkg/index.js")
	for _, tree := range trees {
		if !dockerIgnored(patterns, tree) {
			t.Errorf(".dockerignore does not exclude %s (add **/node_modules)", tree)
		}
	}
	if dockerIgnored(patterns, "cmd/taskgate/main.go") || dockerIgnored(patterns, "go.mod") {
		t.Error(".dockerignore excludes the sources the build needs")
	}
}

func TestDockerIgnored(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		path     string
		want     bool
	}{
		{patterns: []string{"**/node_modules"}, path: "e2e/.npm/node_modules", want: true},
		{patterns: []string{"**/node_modules"}, path: "node_modules/x/y.js", want: true},
		{patterns: []string{"node_modules"}, path: "e2e/node_modules", want: false},
		{patterns: []string{"e2e/*/node_modules"}, path: "e2e/testdata/conformance/node_modules", want: false},
		{patterns: []string{"e2e/**/node_modules"}, path: "e2e/testdata/conformance/node_modules", want: true},
		{patterns: []string{"**/node_modules", "!e2e/.npm/node_modules"}, path: "e2e/.npm/node_modules", want: false},
		{patterns: []string{"*.test"}, path: "taskgate.test", want: true},
		{patterns: []string{"bin"}, path: "cmd/bin", want: false},
	} {
		if got := dockerIgnored(tc.patterns, tc.path); got != tc.want {
			t.Errorf("dockerIgnored(%q, %q) = %v, want %v", tc.patterns, tc.path, got, tc.want)
		}
	}
}
