package policy

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// view is a comparable picture of a Policy.
type view struct {
	Bridge   bool
	OwnTasks bool
	Defaults Settings
	Rules    []ruleView
}

type ruleView struct {
	Match string
	S     Settings
}

func viewOf(p *Policy) view {
	v := view{Bridge: p.BridgeProtocolVersion, OwnTasks: p.OwnTasks, Defaults: p.Defaults}
	for _, r := range p.rules {
		v.Rules = append(v.Rules, ruleView{Match: r.pattern, S: r.s})
	}
	return v
}

// with returns the built-in defaults changed by f.
func with(f func(*Settings)) Settings {
	s := defaultSettings()
	f(&s)
	return s
}

func TestParseValid(t *testing.T) {
	def := defaultSettings()
	tests := []struct {
		name string
		in   string
		want view
	}{
		{name: "empty", in: "", want: view{Bridge: true, Defaults: def}},
		{name: "only comments", in: "# nothing here\n\n# at all\n", want: view{Bridge: true, Defaults: def}},
		{name: "document marker", in: "---\n", want: view{Bridge: true, Defaults: def}},
		{name: "explicit null", in: "~\n", want: view{Bridge: true, Defaults: def}},
		{name: "trailing empty document", in: "rules: []\n---\n", want: view{Bridge: true, Defaults: def}},
		{name: "empty sections", in: "defaults:\nrules:\n", want: view{Bridge: true, Defaults: def}},
		{name: "empty flow sections", in: "defaults: {}\nrules: []\n", want: view{Bridge: true, Defaults: def}},
		{
			name: "own tasks",
			in:   "ownTasks: true\nrules:\n  - match: echo\n    taskSupport: forbidden\n",
			want: view{Bridge: true, OwnTasks: true, Defaults: def, Rules: []ruleView{
				{Match: "echo", S: with(func(s *Settings) { s.TaskSupport = Forbidden })},
			}},
		},
		{name: "own tasks off", in: "ownTasks: false\n", want: view{Bridge: true, Defaults: def}},
		{
			name: "minimal",
			in:   "rules:\n  - match: echo\n    taskSupport: forbidden\n",
			want: view{Bridge: true, Defaults: def, Rules: []ruleView{
				{Match: "echo", S: with(func(s *Settings) { s.TaskSupport = Forbidden })},
			}},
		},
		{
			name: "full",
			in: `
bridgeProtocolVersion: false
defaults:
  taskSupport: required
  ttl:
    default: 90m
    min: 500ms
    max: 48h
  pollInterval: 1500ms
  timeout: 1h30m
  maxConcurrent: 16
  idempotent: true
  maxRetries: 3
rules:
  - match: "build_*"
    taskSupport: optional
    ttl: {default: 2h, max: 6h}
    timeout: 1h
    maxConcurrent: 4
  - match: echo
    taskSupport: forbidden
    idempotent: false
    maxRetries: 0
`,
			want: func() view {
				d := Settings{
					TaskSupport: Required, DefaultTTL: 90 * time.Minute, MinTTL: 500 * time.Millisecond,
					MaxTTL: 48 * time.Hour, PollInterval: 1500 * time.Millisecond, Timeout: 90 * time.Minute,
					MaxConcurrent: 16, Idempotent: true, MaxRetries: 3,
				}
				build := d
				build.TaskSupport, build.DefaultTTL, build.MaxTTL, build.Timeout, build.MaxConcurrent =
					Optional, 2*time.Hour, 6*time.Hour, time.Hour, 4
				echo := d
				echo.TaskSupport, echo.Idempotent, echo.MaxRetries = Forbidden, false, 0
				return view{Bridge: false, Defaults: d, Rules: []ruleView{{"build_*", build}, {"echo", echo}}}
			}(),
		},
		{
			name: "rules before defaults still inherit",
			in:   "rules:\n  - match: a\ndefaults:\n  timeout: 5m\n",
			want: view{Bridge: true, Defaults: with(func(s *Settings) { s.Timeout = 5 * time.Minute }), Rules: []ruleView{
				{Match: "a", S: with(func(s *Settings) { s.Timeout = 5 * time.Minute })},
			}},
		},
		{
			name: "rule inherits ttl field by field",
			in:   "defaults:\n  ttl: {max: 48h}\nrules:\n  - match: a\n    ttl: {min: 2m}\n  - match: b\n    ttl: {max: 2h}\n",
			want: view{Bridge: true, Defaults: with(func(s *Settings) { s.MaxTTL = 48 * time.Hour }), Rules: []ruleView{
				{Match: "a", S: with(func(s *Settings) { s.MaxTTL, s.MinTTL = 48*time.Hour, 2*time.Minute })},
				{Match: "b", S: with(func(s *Settings) { s.MaxTTL = 2 * time.Hour })},
			}},
		},
		{
			name: "maxRetries with idempotent inherited",
			in:   "defaults:\n  idempotent: true\nrules:\n  - match: a\n    maxRetries: 2\n",
			want: view{Bridge: true, Defaults: with(func(s *Settings) { s.Idempotent = true }), Rules: []ruleView{
				{Match: "a", S: with(func(s *Settings) { s.Idempotent, s.MaxRetries = true, 2 })},
			}},
		},
		{
			name: "rule overrides back to zero",
			in:   "defaults:\n  maxConcurrent: 8\nrules:\n  - match: a\n    maxConcurrent: 0\n",
			want: view{Bridge: true, Defaults: with(func(s *Settings) { s.MaxConcurrent = 8 }), Rules: []ruleView{
				{Match: "a", S: def},
			}},
		},
		{
			name: "scalar match taken literally",
			in:   "rules:\n  - match: 123\n  - match: true\n  - match: 'fs/[a-c]\\*'\n",
			want: view{Bridge: true, Defaults: def, Rules: []ruleView{
				{Match: "123", S: def}, {Match: "true", S: def}, {Match: `fs/[a-c]\*`, S: def},
			}},
		},
		{
			name: "yaml spellings",
			in:   "bridgeProtocolVersion: False\ndefaults:\n  maxConcurrent: 0x10\n  timeout: \"45s\"\n  taskSupport: !!str optional\n",
			want: view{Bridge: false, Defaults: with(func(s *Settings) { s.MaxConcurrent, s.Timeout = 16, 45*time.Second })},
		},
		{
			name: "anchors without aliases are fine",
			in:   "defaults: &d\n  timeout: 5m\n",
			want: view{Bridge: true, Defaults: with(func(s *Settings) { s.Timeout = 5 * time.Minute })},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.in), "policy.yaml")
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, viewOf(p)); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		line  int
		field string
		msg   string // substring of Error.Msg
	}{
		// Structure.
		{name: "top is a list", in: "- a\n- b\n", line: 1, msg: "top level must be a mapping (key: value), got a list"},
		{name: "top is a string", in: "hello\n", line: 1, msg: `got "hello"`},
		{name: "top is a number", in: "42\n", line: 1, msg: "got integer 42"},
		{name: "two documents", in: "defaults: {}\n---\nrules: []\n", line: 2, msg: "more than one YAML document"},
		{name: "syntax", in: "defaults:\n  timeout: \"1s\n", line: 2, msg: "invalid YAML: found unexpected end of stream"},
		{name: "unknown anchor", in: "defaults:\n  timeout: *x\n", line: 0, msg: "unknown anchor"},
		{name: "tab indent", in: "defaults:\n\ttimeout: 1s\n", line: 2, msg: "invalid YAML"},
		{name: "NUL byte", in: "defaults:\x00\n", line: 0, msg: "control characters"},
		{name: "deep nesting", in: strings.Repeat("[", 20000), line: 0, msg: "exceeded max depth"},
		{name: "too large", in: "# " + strings.Repeat("x", maxFileSize), line: 0, msg: "limit is"},
		// Keys.
		{name: "unknown top key", in: "bridge: true\n", line: 1, field: "bridge", msg: "unknown field (valid: bridgeProtocolVersion, ownTasks, defaults, rules)"},
		{name: "unknown nested key", in: "defaults:\n  ttl:\n    dflt: 1h\n", line: 3, field: "defaults.ttl.dflt", msg: "valid: default, min, max"},
		{name: "wrong case", in: "defaults:\n  TaskSupport: optional\n", line: 2, field: "defaults.TaskSupport", msg: `did you mean "taskSupport"`},
		{name: "unknown rule key", in: "rules:\n  - match: a\n    tiemout: 1s\n", line: 3, field: "rules[0].tiemout", msg: "unknown field"},
		{name: "match in defaults", in: "defaults:\n  match: a\n", line: 2, field: "defaults.match", msg: "unknown field"},
		{name: "non-scalar key", in: "? [a]\n: 1\n", line: 1, msg: "keys must be plain strings, got a list"},
		{name: "duplicate top key", in: "defaults: {}\nrules: []\ndefaults: {}\n", line: 3, field: "defaults", msg: "duplicate key (first set at line 1)"},
		{name: "duplicate nested key", in: "rules:\n  - match: a\n    timeout: 1s\n    timeout: 2s\n", line: 4, field: "rules[0].timeout", msg: "duplicate key (first set at line 3)"},
		{name: "duplicate flow key", in: "defaults:\n  ttl: {max: 1h, max: 2h}\n", line: 2, field: "defaults.ttl.max", msg: "duplicate key"},
		{name: "alias", in: "defaults:\n  timeout: &t 5s\n  pollInterval: *t\n", line: 3, field: "defaults.pollInterval", msg: "aliases (*t) are not supported"},
		{name: "alias as rule", in: "rules:\n  - &r {match: a}\n  - *r\n", line: 3, field: "rules[1]", msg: "aliases (*r) are not supported"},
		{name: "merge key", in: "defaults: &d\n  timeout: 5s\nrules:\n  - <<: *d\n    match: a\n", line: 4, field: "rules[0].<<", msg: "merge keys are not supported"},
		// Types.
		{name: "bridge yes", in: "bridgeProtocolVersion: yes\n", line: 1, field: "bridgeProtocolVersion", msg: `must be true or false, got "yes"`},
		{name: "ownTasks string", in: "ownTasks: \"true\"\n", line: 1, field: "ownTasks", msg: `must be true or false`},
		{name: "defaults list", in: "defaults: [a]\n", line: 1, field: "defaults", msg: "must be a mapping (key: value), got a list"},
		{name: "rules mapping", in: "rules: {match: a}\n", line: 1, field: "rules", msg: "must be a list of rules"},
		{name: "rule is a string", in: "rules:\n  - echo\n", line: 2, field: "rules[0]", msg: "must be a mapping with a match key"},
		{name: "rule is null", in: "rules:\n  - match: a\n  -\n", line: 3, field: "rules[1]", msg: "got null"},
		{name: "ttl scalar", in: "defaults:\n  ttl: 1h\n", line: 2, field: "defaults.ttl", msg: "must be a mapping"},
		{name: "timeout list", in: "defaults:\n  timeout: [1s]\n", line: 2, field: "defaults.timeout", msg: "must be a duration such as 90s, 30m, 2h, got a list"},
		{name: "timeout null", in: "defaults:\n  timeout:\n", line: 2, field: "defaults.timeout", msg: "got null"},
		{name: "maxConcurrent float", in: "defaults:\n  maxConcurrent: 1.5\n", line: 2, field: "defaults.maxConcurrent", msg: "must be a whole number, got number 1.5"},
		{name: "maxConcurrent string", in: "defaults:\n  maxConcurrent: \"3\"\n", line: 2, field: "defaults.maxConcurrent", msg: "must be a whole number"},
		{name: "maxConcurrent huge", in: "defaults:\n  maxConcurrent: 99999999999999999999\n", line: 2, field: "defaults.maxConcurrent", msg: "must be a whole number, got number 99999999999999999999"},
		{name: "idempotent string", in: "defaults:\n  idempotent: \"true\"\n", line: 2, field: "defaults.idempotent", msg: "must be true or false"},
		// match.
		{name: "missing match", in: "rules:\n  - taskSupport: required\n", line: 2, field: "rules[0]", msg: "missing match"},
		{name: "empty match", in: "rules:\n  - match: \"\"\n", line: 2, field: "rules[0].match", msg: "must not be empty"},
		{name: "null match", in: "rules:\n  - match:\n", line: 2, field: "rules[0].match", msg: "got null"},
		{name: "list match", in: "rules:\n  - match: [a]\n", line: 2, field: "rules[0].match", msg: "got a list"},
		{name: "unclosed class", in: "rules:\n  - match: \"[abc\"\n", line: 2, field: "rules[0].match", msg: `"[abc" is not a valid glob: character class`},
		{name: "empty class", in: "rules:\n  - match: \"a[]\"\n", line: 2, field: "rules[0].match", msg: "empty character class"},
		{name: "reversed range", in: "rules:\n  - match: \"[z-a]\"\n", line: 2, field: "rules[0].match", msg: "reversed"},
		{name: "trailing escape", in: "rules:\n  - match: 'a\\'\n", line: 2, field: "rules[0].match", msg: "unfinished escape"},
		// taskSupport.
		{name: "taskSupport case", in: "defaults:\n  taskSupport: Required\n", line: 2, field: "defaults.taskSupport", msg: `"Required" is not a task support value (use forbidden, optional or required)`},
		{name: "taskSupport bool", in: "rules:\n  - match: a\n    taskSupport: true\n", line: 3, field: "rules[0].taskSupport", msg: `"true" is not a task support value`},
		// Durations.
		{name: "bad duration", in: "rules:\n  - match: a\n    ttl: {max: 6x}\n", line: 3, field: "rules[0].ttl.max", msg: `"6x" is not a duration (use e.g. 90s, 30m, 2h)`},
		{name: "unitless duration", in: "defaults:\n  timeout: 30\n", line: 2, field: "defaults.timeout", msg: `"30" is not a duration`},
		{name: "overflowing duration", in: "defaults:\n  timeout: 9999999999h\n", line: 2, field: "defaults.timeout", msg: "is not a duration"},
		{name: "negative duration", in: "defaults:\n  timeout: -5m\n", line: 2, field: "defaults.timeout", msg: "-5m must be greater than zero"},
		{name: "zero timeout", in: "defaults:\n  timeout: 0s\n", line: 2, field: "defaults.timeout", msg: "must be greater than zero"},
		{name: "bare zero", in: "defaults:\n  pollInterval: 0\n", line: 2, field: "defaults.pollInterval", msg: "must be greater than zero"},
		{name: "zero ttl min", in: "defaults:\n  ttl:\n    min: 0s\n", line: 3, field: "defaults.ttl.min", msg: "must be greater than zero"},
		{name: "sub-ms ttl", in: "defaults:\n  ttl:\n    min: 1500us\n", line: 3, field: "defaults.ttl.min", msg: "whole number of milliseconds"},
		{name: "sub-ms pollInterval", in: "defaults:\n  pollInterval: 1.5ms\n", line: 2, field: "defaults.pollInterval", msg: "whole number of milliseconds"},
		// ttl order after inheritance.
		{name: "defaults min above built-in default", in: "defaults:\n  ttl:\n    min: 2h\n", line: 3, field: "defaults.ttl.min",
			msg: "2h must be at most ttl.default 1h (the built-in default); lower it or set ttl.default here too"},
		{name: "rule max below inherited default", in: "defaults:\n  ttl: {default: 1h}\nrules:\n  - match: a\n    ttl:\n      max: 30m\n", line: 6, field: "rules[0].ttl.max",
			msg: "30m must be at least ttl.default 1h (defaults); raise it or set ttl.default here too"},
		{name: "rule default above inherited max", in: "rules:\n  - match: a\n    ttl: {default: 48h}\n", line: 3, field: "rules[0].ttl.default",
			msg: "48h must be at most ttl.max 24h (defaults)"},
		{name: "both set", in: "rules:\n  - match: a\n    ttl: {default: 2h, max: 1h}\n", line: 3, field: "rules[0].ttl.max",
			msg: "1h must be at least ttl.default 2h"},
		{name: "min above inherited max", in: "rules:\n  - match: a\n    ttl: {min: 48h}\n", line: 3, field: "rules[0].ttl.min",
			msg: "48h must be at most ttl.max 24h (defaults)"},
		{name: "second rule", in: "rules:\n  - match: a\n  - match: b\n    ttl: {max: 1m}\n", line: 4, field: "rules[1].ttl.max", msg: "must be at least ttl.default 1h"},
		// Counts and retries.
		{name: "negative maxConcurrent", in: "defaults:\n  maxConcurrent: -1\n", line: 2, field: "defaults.maxConcurrent", msg: "-1 must not be negative"},
		{name: "negative maxRetries", in: "rules:\n  - match: a\n    maxRetries: -2\n", line: 3, field: "rules[0].maxRetries", msg: "must not be negative"},
		{name: "retries without idempotent", in: "defaults:\n  maxRetries: 3\n", line: 2, field: "defaults.maxRetries",
			msg: "is 3 but idempotent is false (the built-in default)"},
		{name: "retries with idempotent false", in: "rules:\n  - match: a\n    idempotent: false\n    maxRetries: 1\n", line: 4, field: "rules[0].maxRetries",
			msg: "is 1 but idempotent is false; lost calls"},
		{name: "idempotent false with inherited retries", in: "defaults:\n  idempotent: true\n  maxRetries: 2\nrules:\n  - match: a\n    idempotent: false\n", line: 6, field: "rules[0].idempotent",
			msg: "is false but maxRetries is 2 (defaults); set maxRetries: 0 here too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.in), "policy.yaml")
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error", short(tt.in), viewOf(p))
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want errors.Is ErrInvalid", short(tt.in), err)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %T %v, want *Error", short(tt.in), err, err)
			}
			if pe.File != "policy.yaml" || pe.Line != tt.line || pe.Field != tt.field || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("Parse(%q) = %v,\nwant policy.yaml line %d, field %q, msg containing %q", short(tt.in), err, tt.line, tt.field, tt.msg)
			}
		})
	}
}

// short truncates s for failure messages.
func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

func TestErrorString(t *testing.T) {
	_, err := Parse([]byte("rules:\n  - match: a\n    ttl: {max: 6x}\n"), "policy.yaml")
	want := `policy.yaml:3:16: rules[0].ttl.max: "6x" is not a duration (use e.g. 90s, 30m, 2h)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse(...) = %v, want %s", err, want)
	}
	_, err = Parse([]byte("\x00"), "")
	if want := "<policy>: invalid YAML: control characters are not allowed"; err == nil || err.Error() != want {
		t.Errorf("Parse(%q) = %v, want %s", "\x00", err, want)
	}
}

// billionLaughs returns the classic alias bomb: expanded, it would hold
// 10^levels strings.
func billionLaughs(levels int) string {
	var b strings.Builder
	b.WriteString("x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= levels; i++ {
		b.WriteString("x" + strconv.Itoa(i) + ": &x" + strconv.Itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*x" + strconv.Itoa(i-1))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestParseAliasBomb(t *testing.T) {
	bomb := billionLaughs(9)
	tests := []struct {
		name string
		in   string
	}{
		{name: "top level", in: bomb},
		{name: "in rules", in: "rules:\n" + indent(bomb, "  - ")},
		{name: "in ttl", in: "defaults:\n  ttl:\n" + indent(bomb, "    ")},
		{name: "anchors in ttl values", in: "defaults:\n  ttl:\n    default: &a 1h\n    min: *a\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse([]byte(tt.in), "policy.yaml")
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want ErrInvalid", short(tt.in), err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
				t.Errorf("Parse(%q) allocated %d bytes, want < 4 MiB (aliases must not be expanded)", short(tt.in), n)
			}
		})
	}
}

// indent prefixes every line of s: the first with first, the rest with as
// many spaces.
func indent(s, first string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	pad := strings.Repeat(" ", len(first))
	for i := range lines {
		if i == 0 {
			lines[i] = first + lines[i]
		} else {
			lines[i] = pad + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestLoadExample(t *testing.T) {
	p, err := Load("../policy.example.yaml")
	if err != nil {
		t.Fatalf("Load(../policy.example.yaml) error: %v", err)
	}
	d := Settings{
		TaskSupport: Optional, DefaultTTL: time.Hour, MinTTL: 10 * time.Second, MaxTTL: 24 * time.Hour,
		PollInterval: 30 * time.Second, Timeout: 30 * time.Minute, MaxConcurrent: 8,
	}
	build := d
	build.TaskSupport, build.DefaultTTL, build.MaxTTL, build.PollInterval, build.Timeout, build.MaxConcurrent =
		Required, 2*time.Hour, 6*time.Hour, time.Minute, time.Hour, 4
	search := d
	search.Idempotent, search.MaxRetries, search.Timeout = true, 2, 2*time.Minute
	echo := d
	echo.TaskSupport = Forbidden
	tmp := d
	tmp.DefaultTTL, tmp.MaxTTL, tmp.MaxConcurrent = 5*time.Minute, 30*time.Minute, 0
	want := view{Bridge: true, Defaults: d, Rules: []ruleView{
		{Match: "build_*", S: build},
		{Match: "search/[a-z]*", S: search},
		{Match: "echo", S: echo},
		{Match: "tmp.?", S: tmp},
	}}
	if diff := cmp.Diff(want, viewOf(p)); diff != "" {
		t.Errorf("Load(../policy.example.yaml) mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml")
	if err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("Load(missing) = %v, want a non-ErrInvalid error", err)
	}
}

func TestFor(t *testing.T) {
	p, err := Parse([]byte(`
defaults:
  timeout: 10m
rules:
  - match: build_fast
    taskSupport: forbidden
  - match: "build_*"
    taskSupport: required
  - match: "fs/*"
    maxConcurrent: 2
  - match: "a.b-c"
    maxConcurrent: 3
  - match: "\\*"
    maxConcurrent: 4
  - match: "*"
    taskSupport: optional
    timeout: 1m
`), "for.yaml")
	if err != nil {
		t.Fatalf("Parse error: %v", err)
	}
	base := with(func(s *Settings) { s.Timeout = 10 * time.Minute })
	set := func(f func(*Settings)) Settings {
		s := base
		f(&s)
		return s
	}
	tests := []struct {
		tool string
		want Settings
	}{
		{tool: "build_fast", want: set(func(s *Settings) { s.TaskSupport = Forbidden })},
		{tool: "build_slow", want: set(func(s *Settings) { s.TaskSupport = Required })},
		{tool: "build_fast2", want: set(func(s *Settings) { s.TaskSupport = Required })},
		{tool: "fs/read/deep", want: set(func(s *Settings) { s.MaxConcurrent = 2 })},
		{tool: "a.b-c", want: set(func(s *Settings) { s.MaxConcurrent = 3 })},
		{tool: "*", want: set(func(s *Settings) { s.MaxConcurrent = 4 })},
		{tool: "other", want: set(func(s *Settings) { s.Timeout = time.Minute })},
		{tool: "", want: set(func(s *Settings) { s.Timeout = time.Minute })},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, p.For(tt.tool)); diff != "" {
				t.Errorf("For(%q) mismatch (-want +got):\n%s", tt.tool, diff)
			}
		})
	}

	if diff := cmp.Diff(base, mustParse(t, "defaults: {timeout: 10m}").For("x")); diff != "" {
		t.Errorf("For without rules mismatch (-want +got):\n%s", diff)
	}
	var nilPolicy *Policy
	if diff := cmp.Diff(defaultSettings(), nilPolicy.For("x")); diff != "" {
		t.Errorf("(*Policy)(nil).For mismatch (-want +got):\n%s", diff)
	}
}

func mustParse(t testing.TB, in string) *Policy {
	t.Helper()
	p, err := Parse([]byte(in), "test.yaml")
	if err != nil {
		t.Fatalf("Parse(%q) error: %v", in, err)
	}
	return p
}

// benchPolicy has ten rules; "zz_tool" matches only the last.
const benchPolicy = `
rules:
  - {match: "build_*", taskSupport: required}
  - {match: "fs/*/write", taskSupport: required}
  - {match: "deploy-[a-z]*", timeout: 1h}
  - {match: echo, taskSupport: forbidden}
  - {match: "search.?", maxConcurrent: 3}
  - {match: "*_slow", taskSupport: required}
  - {match: "test_*_e2e", timeout: 2h}
  - {match: "[!a-m]x*", maxConcurrent: 1}
  - {match: "git-*", maxConcurrent: 2}
  - {match: "zz_*", maxConcurrent: 9}
`

func TestForAllocs(t *testing.T) {
	p := mustParse(t, benchPolicy)
	for _, tool := range []string{"zz_tool", "unmatched_tool_name", "build_x"} {
		if n := testing.AllocsPerRun(100, func() { _ = p.For(tool) }); n != 0 {
			t.Errorf("For(%q) allocates %v times, want 0", tool, n)
		}
	}
}

func BenchmarkFor(b *testing.B) {
	p := mustParse(b, benchPolicy)
	for _, tool := range []string{"build_x", "zz_tool", "unmatched_tool_name"} {
		b.Run(tool, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = p.For(tool)
			}
		})
	}
}
