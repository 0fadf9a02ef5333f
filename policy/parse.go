package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ErrInvalid is wrapped by every error about the content of a policy file.
var ErrInvalid = errors.New("policy: invalid policy file")

// Error is a problem at one place in a policy file. It wraps ErrInvalid.
type Error struct {
	File   string // the filename given to Parse or Load
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Field  string // path of the offending field, e.g. "rules[0].ttl.max"; empty for the whole file
	Msg    string // what is wrong and, where possible, how to fix it
}

// Error formats e as "file:line:col: field: msg", leaving out unknown parts.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":" + strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// maxFileSize bounds the input to Parse; real policy files are a few KiB.
const maxFileSize = 1 << 20

// YAML short tags (yaml.Node.ShortTag).
const (
	tagNull  = "!!null"
	tagBool  = "!!bool"
	tagInt   = "!!int"
	tagFloat = "!!float"
	tagStr   = "!!str"
)

// Keys allowed in each mapping, in documentation order.
var (
	topKeys      = []string{"bridgeProtocolVersion", "ownTasks", "defaults", "rules"}
	settingsKeys = []string{"taskSupport", "ttl", "pollInterval", "timeout", "maxConcurrent", "idempotent", "maxRetries"}
	ruleKeys     = append([]string{"match"}, settingsKeys...)
	ttlKeys      = []string{"default", "min", "max"}
)

// Parse parses a policy file; filename is used in error messages only. An
// empty file (or one holding only comments) yields Default(). Every error
// about the content is an *Error wrapping ErrInvalid and names the line and the
// field. YAML aliases are rejected, so the result's size is bounded by the
// input's.
func Parse(data []byte, filename string) (*Policy, error) {
	if filename == "" {
		filename = "<policy>"
	}
	ps := &parser{file: filename}
	if len(data) > maxFileSize {
		return nil, ps.errf(nil, "", "file is %d bytes; the limit is %d", len(data), maxFileSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return Default(), nil
	case err != nil:
		return nil, ps.yamlErr(err)
	}
	for { // only empty documents may follow
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, ps.yamlErr(err)
		}
		if len(extra.Content) != 1 || !isNull(extra.Content[0]) {
			return nil, ps.errf(&extra, "", "more than one YAML document; remove the second \"---\"")
		}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return ps.top(root)
}

// parser turns a yaml.Node tree into a Policy, failing on the first problem.
type parser struct {
	file string
}

// errf returns an *Error positioned at n (which may be nil).
func (ps *parser) errf(n *yaml.Node, field, format string, args ...any) *Error {
	e := &Error{File: ps.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// yamlErr converts a yaml.v3 syntax error ("yaml: line 3: msg") to an *Error.
func (ps *parser) yamlErr(err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: ps.file, Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				e.Line, e.Msg = n, tail
			}
		}
	}
	e.Msg = "invalid YAML: " + e.Msg
	return e
}

// kindName describes n for "must be X, got Y" messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case tagNull:
			return "null"
		case tagBool:
			return "boolean " + n.Value
		case tagInt:
			return "integer " + n.Value
		case tagFloat:
			return "number " + n.Value
		case tagStr:
			return strconv.Quote(n.Value)
		}
		return n.ShortTag() + " " + strconv.Quote(n.Value)
	}
	return "nothing"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull
}

// entry is one key: value pair of a mapping.
type entry struct {
	key, val *yaml.Node
}

// entries checks mapping m at path and returns its pairs. Keys must be plain
// scalars from allowed and unique; values must not be aliases. A null m (e.g.
// "rules:" with everything below commented out) has no entries.
func (ps *parser) entries(m *yaml.Node, path string, allowed []string) ([]entry, error) {
	if isNull(m) {
		return nil, nil
	}
	if m.Kind != yaml.MappingNode {
		return nil, ps.errf(m, path, "must be a mapping (key: value), got %s", kindName(m))
	}
	out := make([]entry, 0, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		field := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			return nil, ps.errf(k, path, "keys must be plain strings, got %s", kindName(k))
		}
		if k.Value == "<<" {
			return nil, ps.errf(k, field, "YAML merge keys are not supported; write the fields out")
		}
		if !contains(allowed, k.Value) {
			return nil, ps.errf(k, field, "unknown field%s", suggest(k.Value, allowed))
		}
		for _, prev := range out {
			if prev.key.Value == k.Value {
				return nil, ps.errf(k, field, "duplicate key (first set at line %d)", prev.key.Line)
			}
		}
		if v.Kind == yaml.AliasNode {
			return nil, ps.errf(v, field, "YAML aliases (*%s) are not supported; write the value out", v.Value)
		}
		out = append(out, entry{k, v})
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest names the allowed key that differs from key only in case, or else
// lists all allowed keys.
func suggest(key string, allowed []string) string {
	for _, a := range allowed {
		if strings.EqualFold(a, key) {
			return fmt.Sprintf("; did you mean %q? (keys are case-sensitive)", a)
		}
	}
	return " (valid: " + strings.Join(allowed, ", ") + ")"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// top parses the top-level mapping.
func (ps *parser) top(root *yaml.Node) (*Policy, error) {
	p := Default()
	if isNull(root) { // a document holding only "---" or "~"
		return p, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, ps.errf(root, "", "the top level must be a mapping (key: value), got %s", kindName(root))
	}
	es, err := ps.entries(root, "", topKeys)
	if err != nil {
		return nil, err
	}
	var defaults, rules *yaml.Node
	for _, e := range es {
		switch e.key.Value {
		case "bridgeProtocolVersion":
			if p.BridgeProtocolVersion, err = ps.boolean(e.val, e.key.Value); err != nil {
				return nil, err
			}
		case "ownTasks":
			if p.OwnTasks, err = ps.boolean(e.val, e.key.Value); err != nil {
				return nil, err
			}
		case "defaults":
			defaults = e.val
		case "rules":
			rules = e.val
		}
	}
	if defaults != nil {
		// Built-in defaults are consistent, so any violation is the file's.
		s, _, err := ps.settings(defaults, "defaults", p.Defaults, false, "the built-in default")
		if err != nil {
			return nil, err
		}
		p.Defaults = s
	}
	if rules != nil && !isNull(rules) {
		if rules.Kind != yaml.SequenceNode {
			return nil, ps.errf(rules, "rules", "must be a list of rules (\"- match: ...\"), got %s", kindName(rules))
		}
		p.rules = make([]rule, 0, len(rules.Content))
		for i, rn := range rules.Content {
			path := "rules[" + strconv.Itoa(i) + "]"
			if rn.Kind == yaml.AliasNode {
				return nil, ps.errf(rn, path, "YAML aliases (*%s) are not supported; write the rule out", rn.Value)
			}
			if rn.Kind != yaml.MappingNode {
				return nil, ps.errf(rn, path, "must be a mapping with a match key, got %s", kindName(rn))
			}
			s, r, err := ps.settings(rn, path, p.Defaults, true, "defaults")
			if err != nil {
				return nil, err
			}
			r.s = s
			p.rules = append(p.rules, r)
		}
	}
	return p, nil
}

// settings parses the settings mapping m at path on top of base. For rules
// (isRule) it also parses and requires match. from names where base comes
// from, for messages.
func (ps *parser) settings(m *yaml.Node, path string, base Settings, isRule bool, from string) (Settings, rule, error) {
	allowed := settingsKeys
	if isRule {
		allowed = ruleKeys
	}
	es, err := ps.entries(m, path, allowed)
	if err != nil {
		return Settings{}, rule{}, err
	}
	var (
		s        = base
		r        rule
		hasMatch bool
		// Nodes of fields set here (nil = inherited), for cross-field checks.
		ttlDefault, ttlMin, ttlMax, idempotent, maxRetries *yaml.Node
	)
	for _, e := range es {
		field, v := join(path, e.key.Value), e.val
		switch e.key.Value {
		case "match":
			hasMatch = true
			if r.pattern, r.glob, err = ps.match(v, field); err != nil {
				return Settings{}, rule{}, err
			}
		case "taskSupport":
			if s.TaskSupport, err = ps.taskSupport(v, field); err != nil {
				return Settings{}, rule{}, err
			}
		case "ttl":
			tes, err := ps.entries(v, field, ttlKeys)
			if err != nil {
				return Settings{}, rule{}, err
			}
			for _, te := range tes {
				tf := join(field, te.key.Value)
				var d time.Duration
				if d, err = ps.duration(te.val, tf, true); err != nil {
					return Settings{}, rule{}, err
				}
				switch te.key.Value {
				case "default":
					s.DefaultTTL, ttlDefault = d, te.val
				case "min":
					s.MinTTL, ttlMin = d, te.val
				case "max":
					s.MaxTTL, ttlMax = d, te.val
				}
			}
		case "pollInterval":
			if s.PollInterval, err = ps.duration(v, field, true); err != nil {
				return Settings{}, rule{}, err
			}
		case "timeout":
			if s.Timeout, err = ps.duration(v, field, false); err != nil {
				return Settings{}, rule{}, err
			}
		case "maxConcurrent":
			if s.MaxConcurrent, err = ps.count(v, field); err != nil {
				return Settings{}, rule{}, err
			}
		case "idempotent":
			if s.Idempotent, err = ps.boolean(v, field); err != nil {
				return Settings{}, rule{}, err
			}
			idempotent = v
		case "maxRetries":
			if s.MaxRetries, err = ps.count(v, field); err != nil {
				return Settings{}, rule{}, err
			}
			maxRetries = v
		}
	}
	if isRule && !hasMatch {
		return Settings{}, rule{}, ps.errf(m, path, "missing match (the glob of tool names this rule applies to)")
	}

	// min <= default <= max after inheritance. Check min/max first so that
	// the message names the pair the file actually got wrong.
	ttlPath := join(path, "ttl")
	lo, def, hi := bound{"ttl.min", s.MinTTL, ttlMin}, bound{"ttl.default", s.DefaultTTL, ttlDefault}, bound{"ttl.max", s.MaxTTL, ttlMax}
	for _, pair := range [][2]bound{{lo, hi}, {lo, def}, {def, hi}} {
		if err := ps.order(ttlPath, from, pair[0], pair[1]); err != nil {
			return Settings{}, rule{}, err
		}
	}

	if s.MaxRetries > 0 && !s.Idempotent {
		if maxRetries != nil {
			why := "idempotent is false"
			if idempotent == nil {
				why += " (" + from + ")"
			}
			return Settings{}, rule{}, ps.errf(maxRetries, join(path, "maxRetries"),
				"is %d but %s; lost calls are re-run only for idempotent tools, so set idempotent: true or maxRetries: 0", s.MaxRetries, why)
		}
		return Settings{}, rule{}, ps.errf(idempotent, join(path, "idempotent"),
			"is false but maxRetries is %d (%s); set maxRetries: 0 here too", s.MaxRetries, from)
	}
	return s, r, nil
}

// bound is one of the ttl bounds; n is nil when the value was inherited.
type bound struct {
	name string
	v    time.Duration
	n    *yaml.Node
}

// order checks lo.v <= hi.v and blames a bound that was set here (at least one
// was, since inherited values are consistent).
func (ps *parser) order(ttlPath, from string, lo, hi bound) error {
	if lo.v <= hi.v {
		return nil
	}
	leaf := func(b bound) string { return strings.TrimPrefix(b.name, "ttl.") }
	switch {
	case lo.n != nil && hi.n != nil:
		return ps.errf(hi.n, join(ttlPath, leaf(hi)), "%s must be at least %s %s", fmtDur(hi.v), lo.name, fmtDur(lo.v))
	case hi.n != nil:
		return ps.errf(hi.n, join(ttlPath, leaf(hi)), "%s must be at least %s %s (%s); raise it or set %s here too",
			fmtDur(hi.v), lo.name, fmtDur(lo.v), from, lo.name)
	default:
		return ps.errf(lo.n, join(ttlPath, leaf(lo)), "%s must be at most %s %s (%s); lower it or set %s here too",
			fmtDur(lo.v), hi.name, fmtDur(hi.v), from, hi.name)
	}
}

// fmtDur formats d like the file would: 1h, 1h30m, 90s rather than 1h0m0s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// scalar checks that n is a non-null scalar; want describes the expected value.
func (ps *parser) scalar(n *yaml.Node, field, want string) error {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return ps.errf(n, field, "must be %s, got %s", want, kindName(n))
	}
	return nil
}

// duration parses a positive Go duration; wholeMS also requires whole
// milliseconds, the protocol's unit for ttl and pollInterval.
func (ps *parser) duration(n *yaml.Node, field string, wholeMS bool) (time.Duration, error) {
	if err := ps.scalar(n, field, "a duration such as 90s, 30m, 2h"); err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		return 0, ps.errf(n, field, "%q is not a duration (use e.g. 90s, 30m, 2h)", n.Value)
	case d <= 0:
		return 0, ps.errf(n, field, "%s must be greater than zero", n.Value)
	case wholeMS && d%time.Millisecond != 0:
		return 0, ps.errf(n, field, "%s is not a whole number of milliseconds (the protocol reports it in ms)", n.Value)
	}
	return d, nil
}

func (ps *parser) boolean(n *yaml.Node, field string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagBool || n.Decode(&b) != nil {
		return false, ps.errf(n, field, "must be true or false, got %s", kindName(n))
	}
	return b, nil
}

// count parses a non-negative integer.
func (ps *parser) count(n *yaml.Node, field string) (int, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagInt {
		return 0, ps.errf(n, field, "must be a whole number, got %s", kindName(n))
	}
	var c int
	if err := n.Decode(&c); err != nil {
		return 0, ps.errf(n, field, "%s is out of range", n.Value)
	}
	if c < 0 {
		return 0, ps.errf(n, field, "%d must not be negative", c)
	}
	return c, nil
}

func (ps *parser) taskSupport(n *yaml.Node, field string) (TaskSupport, error) {
	if err := ps.scalar(n, field, "forbidden, optional or required"); err != nil {
		return "", err
	}
	switch ts := TaskSupport(n.Value); ts {
	case Forbidden, Optional, Required:
		return ts, nil
	}
	return "", ps.errf(n, field, "%q is not a task support value (use forbidden, optional or required)", n.Value)
}

// match parses a rule's glob. Any scalar is taken literally as text, so
// "match: 123" matches the tool named "123".
func (ps *parser) match(n *yaml.Node, field string) (string, glob, error) {
	if err := ps.scalar(n, field, "a glob of tool names such as \"build_*\""); err != nil {
		return "", glob{}, err
	}
	if n.Value == "" {
		return "", glob{}, ps.errf(n, field, "must not be empty (use \"*\" to match every tool)")
	}
	g, err := compileGlob(n.Value)
	if err != nil {
		return "", glob{}, ps.errf(n, field, "%q is not a valid glob: %v", n.Value, err)
	}
	return n.Value, g, nil
}
