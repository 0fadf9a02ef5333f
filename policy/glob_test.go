package policy

import (
	"errors"
	"testing"
	"unicode/utf8"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern string
		name    string
		want    bool
	}{
		{pattern: "echo", name: "echo", want: true},
		{pattern: "echo", name: "echo2", want: false},
		{pattern: "echo", name: "ech", want: false},
		{pattern: "echo", name: "Echo", want: false},
		{pattern: "*", name: "", want: true},
		{pattern: "*", name: "any/thing.at-all", want: true},
		{pattern: "**", name: "x", want: true},
		{pattern: "build_*", name: "build_", want: true},
		{pattern: "build_*", name: "build_linux/amd64", want: true},
		{pattern: "build_*", name: "rebuild_x", want: false},
		{pattern: "*_test", name: "unit_test", want: true},
		{pattern: "*_test", name: "unit_test_", want: false},
		{pattern: "a*b*c", name: "abc", want: true},
		{pattern: "a*b*c", name: "aXbYbZc", want: true},
		{pattern: "a*b*c", name: "aXbYcZ", want: false},
		{pattern: "*a*a*a*b", name: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", want: false},
		{pattern: "fs/*", name: "fs/read", want: true},
		{pattern: "fs/*", name: "fs/dir/read", want: true},
		{pattern: "fs/*/read", name: "fs/a/b/read", want: true},
		{pattern: "fs.*", name: "fs.read", want: true},
		{pattern: "fs.*", name: "fsXread", want: false}, // '.' is literal
		{pattern: "git-*", name: "git-log", want: true},
		{pattern: "?", name: "", want: false},
		{pattern: "?", name: "a", want: true},
		{pattern: "?", name: "é", want: true}, // one rune, two bytes
		{pattern: "?", name: "ab", want: false},
		{pattern: "tmp.?", name: "tmp.1", want: true},
		{pattern: "tmp.?", name: "tmp.", want: false},
		{pattern: "[abc]x", name: "bx", want: true},
		{pattern: "[abc]x", name: "dx", want: false},
		{pattern: "[a-z]1", name: "q1", want: true},
		{pattern: "[a-z]1", name: "Q1", want: false},
		{pattern: "[!a-z]1", name: "Q1", want: true},
		{pattern: "[!a-z]1", name: "q1", want: false},
		{pattern: "[^a-z]1", name: "Q1", want: true},
		{pattern: "[!x]", name: "", want: false},
		{pattern: "[-_]", name: "-", want: true},
		{pattern: "[_-]", name: "-", want: true},
		{pattern: "[_-]", name: "_", want: true},
		{pattern: "[a-z0-9_-]*", name: "-x", want: true},
		{pattern: "[\\]]", name: "]", want: true},
		{pattern: "[a\\-z]", name: "-", want: true},
		{pattern: "[a\\-z]", name: "b", want: false},
		{pattern: "[é-ë]", name: "ê", want: true},
		{pattern: "\\*", name: "*", want: true},
		{pattern: "\\*", name: "x", want: false},
		{pattern: "a\\?", name: "a?", want: true},
		{pattern: "a\\?", name: "ab", want: false},
		{pattern: "\\[x]", name: "[x]", want: true},
		{pattern: "\\\\", name: "\\", want: true},
		{pattern: "\\a", name: "a", want: true},
		{pattern: "a*", name: "a\xff", want: true}, // invalid UTF-8 in names is fine
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"~"+tt.name, func(t *testing.T) {
			g, err := compileGlob(tt.pattern)
			if err != nil {
				t.Fatalf("compileGlob(%q) error: %v", tt.pattern, err)
			}
			if got := g.match(tt.name); got != tt.want {
				t.Errorf("compileGlob(%q).match(%q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
			}
			if got := matchRef(g.toks, tt.name); got != tt.want {
				t.Errorf("matchRef(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
			}
		})
	}
}

func TestCompileGlobErrors(t *testing.T) {
	tests := []struct {
		pattern string
		want    error
	}{
		{pattern: "a\\", want: errGlobTrailingEscape},
		{pattern: "[a\\", want: errGlobTrailingEscape},
		{pattern: "[a-\\", want: errGlobTrailingEscape},
		{pattern: "[abc", want: errGlobUnclosedClass},
		{pattern: "[", want: errGlobUnclosedClass},
		{pattern: "[!", want: errGlobUnclosedClass},
		{pattern: "[]", want: errGlobEmptyClass},
		{pattern: "[!]", want: errGlobEmptyClass},
		{pattern: "[z-a]", want: errGlobBadRange},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			_, err := compileGlob(tt.pattern)
			if !errors.Is(err, tt.want) {
				t.Errorf("compileGlob(%q) = %v, want %v", tt.pattern, err, tt.want)
			}
		})
	}
}

// matchRef is an obviously correct, exponential reference matcher.
func matchRef(toks []token, name string) bool {
	if len(toks) == 0 {
		return name == ""
	}
	t := &toks[0]
	switch t.kind {
	case tokStar:
		for i := 0; ; {
			if matchRef(toks[1:], name[i:]) {
				return true
			}
			if i == len(name) {
				return false
			}
			_, w := utf8.DecodeRuneInString(name[i:])
			i += w
		}
	case tokLit:
		return len(name) >= len(t.lit) && name[:len(t.lit)] == t.lit && matchRef(toks[1:], name[len(t.lit):])
	case tokAny:
		if name == "" {
			return false
		}
		_, w := utf8.DecodeRuneInString(name)
		return matchRef(toks[1:], name[w:])
	case tokClass:
		if name == "" {
			return false
		}
		r, w := utf8.DecodeRuneInString(name)
		return t.classMatch(r) && matchRef(toks[1:], name[w:])
	}
	panic("unknown token kind")
}

func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"a*b*c", "aXbYbZc"}, {"*a*a*b", "aaaaab"}, {"[!a-c]?*\\*", "d1*"}, {"?*?", "ab"}, {"fs/*", "fs/x/y"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if len(pattern) > 24 || len(name) > 24 { // matchRef is exponential
			return
		}
		g, err := compileGlob(pattern)
		if err != nil {
			return
		}
		if got, want := g.match(name), matchRef(g.toks, name); got != want {
			t.Errorf("compileGlob(%q).match(%q) = %v, want %v", pattern, name, got, want)
		}
	})
}

func TestRetriesRequested(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       bool
	}{
		{name: "defaults", yaml: "", want: false},
		{name: "idempotent without retries", yaml: "rules:\n  - match: a\n    idempotent: true\n", want: false},
		{name: "rule with retries", yaml: "rules:\n  - match: a\n    idempotent: true\n    maxRetries: 2\n", want: true},
		{name: "defaults with retries", yaml: "defaults:\n  idempotent: true\n  maxRetries: 1\n", want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if got := p.RetriesRequested(); got != tc.want {
				t.Errorf("RetriesRequested() = %v, want %v", got, tc.want)
			}
		})
	}
}
