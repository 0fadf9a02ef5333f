package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("../policy.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		"",
		"---\n",
		"rules:\n  - match: echo\n    taskSupport: forbidden\n",
		"defaults: {ttl: {default: 2h, min: 1ms, max: 9000h}, idempotent: true, maxRetries: 5}\nrules: [{match: '[!a-c]*\\*', ttl: {max: 2h}}]\n",
		"defaults:\n  ttl: {max: 6x}\n",
		"defaults:\n  ttl: {max: 1e300h}\n",
		"defaults:\n  timeout: 9223372036854775807ns\n",
		"rules:\n  - match: a\n    ttl: {max: 1ms}\n",
		"bridgeProtocolVersion: true\nbridgeProtocolVersion: false\n",
		"defaults:\n  TaskSupport: Required\n",
		"rules:\n  - match: \"a\\x00b\"\n",
		"defaults:\x00\n",
		"rules:\n  - match: \"\\0\"\n",
		"\"match\\u0000\": a\n",
		"\xff\xfe\xfd",
		"rules: [" + strings.Repeat("{match: '"+strings.Repeat("x", 1000)+"'}, ", 8) + "]\n",
		"rules:\n  - match: '" + strings.Repeat("*a", 2000) + "'\n",
		strings.Repeat("[", 10001),
		strings.Repeat("- ", 2000) + "a\n",
		billionLaughs(9),
		"rules:\n  - &r {match: a}\n  - *r\n",
		"defaults: &d {timeout: 1s}\nrules:\n  - <<: *d\n    match: a\n",
		"a: &a [*a]\n",
		"!!binary aGVsbG8=\n",
		"defaults: !!map {timeout: !!str 5s}\n",
		"? [a, b]\n: c\n",
		"%YAML 1.2\n---\ndefaults: {}\n",
		"defaults: {}\n---\ndefaults: {}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.yaml")
		if err != nil {
			var pe *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %v, want an *Error wrapping ErrInvalid", short(string(data)), err)
			}
			if p != nil {
				t.Fatalf("Parse(%q) = %v, %v; want nil policy with error", short(string(data)), p, err)
			}
			return
		}
		checkSettings(t, data, "defaults", p.Defaults)
		for i, r := range p.rules {
			checkSettings(t, data, r.pattern, r.s)
			if _, err := compileGlob(r.pattern); err != nil {
				t.Errorf("Parse(%q): rules[%d].match %q does not recompile: %v", short(string(data)), i, r.pattern, err)
			}
			if got := p.For(r.pattern); got.TTL(nil) < got.MinTTL {
				t.Errorf("Parse(%q): For(%q).TTL(nil) = %v below MinTTL", short(string(data)), r.pattern, got.TTL(nil))
			}
		}
	})
}

// checkSettings asserts the invariants Parse guarantees for every Settings.
func checkSettings(t *testing.T, data []byte, where string, s Settings) {
	t.Helper()
	ok := s.MinTTL > 0 && s.MinTTL <= s.DefaultTTL && s.DefaultTTL <= s.MaxTTL &&
		s.PollInterval > 0 && s.Timeout > 0 && s.MaxConcurrent >= 0 && s.MaxRetries >= 0 &&
		(s.MaxRetries == 0 || s.Idempotent) &&
		(s.TaskSupport == Forbidden || s.TaskSupport == Optional || s.TaskSupport == Required)
	for _, d := range []int64{int64(s.MinTTL), int64(s.DefaultTTL), int64(s.MaxTTL), int64(s.PollInterval)} {
		ok = ok && d%1e6 == 0
	}
	if !ok {
		t.Errorf("Parse(%q): %s settings %+v break the invariants", short(string(data)), where, s)
	}
}
