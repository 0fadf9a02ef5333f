package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"
)

// TaskSupport is a tool's execution.taskSupport value (spec T-08..T-10).
type TaskSupport string

// The execution.taskSupport values.
const (
	// Forbidden: clients must not call the tool as a task; a task-augmented
	// call is answered with JSON-RPC error -32601 (T-08).
	Forbidden TaskSupport = "forbidden"
	// Optional: clients may call the tool with or without a task (T-09).
	Optional TaskSupport = "optional"
	// Required: clients must call the tool as a task; a plain call is
	// answered with JSON-RPC error -32601 (T-10).
	Required TaskSupport = "required"
)

// Settings are the resolved settings for one tool. Settings returned by
// Policy.For satisfy 0 < MinTTL <= DefaultTTL <= MaxTTL, with all three and
// PollInterval whole milliseconds, and PollInterval, Timeout > 0.
type Settings struct {
	TaskSupport   TaskSupport   // default Optional
	DefaultTTL    time.Duration // ttl when the request gives none; default 1h
	MinTTL        time.Duration // lower clamp; default 1s
	MaxTTL        time.Duration // upper clamp; default 24h
	PollInterval  time.Duration // longest pollInterval a running task reports (it reports 5 % of its age, at least 100 ms, up to this); a finished one reports it; default 30s
	Timeout       time.Duration // max duration of the background upstream call; default 30m
	MaxConcurrent int           // max concurrently running task calls of this tool in one taskgate process; 0 = unlimited (default)
	Idempotent    bool          // the operator says re-running the call is harmless; default false. Reserved: lost calls are not re-run yet
	MaxRetries    int           // when Idempotent, how often a lost call may be re-run; default 0
}

// defaultSettings returns the built-in defaults documented on Settings.
func defaultSettings() Settings {
	return Settings{
		TaskSupport:  Optional,
		DefaultTTL:   time.Hour,
		MinTTL:       time.Second,
		MaxTTL:       24 * time.Hour,
		PollInterval: 30 * time.Second,
		Timeout:      30 * time.Minute,
	}
}

// Policy is a parsed policy file. It is immutable and safe for concurrent use;
// callers must treat its fields as read-only (rules are resolved against
// Defaults when parsing, so changing Defaults later does not reach them).
type Policy struct {
	// BridgeProtocolVersion: when a client asks for 2025-11-25 and the upstream
	// answers an older version, answer 2025-11-25 and translate. Default true.
	BridgeProtocolVersion bool
	// OwnTasks: taskgate serves tasks even when the upstream declares the
	// tasks capability itself. The upstream's capability is replaced by
	// taskgate's in initialize, its tools' execution.taskSupport by the
	// policy's, and task-augmented calls run as they do in front of an
	// upstream without tasks (stored by taskgate, the upstream sees plain
	// calls). The same holds for a 2026-07-28 upstream that offers the tasks
	// extension: taskgate's extension replaces its own in server/discover,
	// and its calls reach it without the extension declared. Default false:
	// an upstream that declares tasks gets its task traffic passed through
	// unchanged.
	OwnTasks bool
	// Defaults apply to tools that no rule matches. Rules inherit every field
	// they leave unset from Defaults.
	Defaults Settings

	rules []rule // in file order; first match wins
}

// rule is one entry of the rules list with its settings fully resolved.
type rule struct {
	pattern string
	glob    glob
	s       Settings
}

// Default returns the policy used when there is no policy file: built-in
// defaults and no rules.
func Default() *Policy {
	return &Policy{BridgeProtocolVersion: true, Defaults: defaultSettings()}
}

// Load reads the policy file at path and Parses it. Errors about the file's
// content wrap ErrInvalid.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(data, path)
}

// For returns the settings for tool: those of the first rule whose pattern
// matches the whole name, else Defaults. A nil *Policy behaves like Default().
// For does not allocate.
func (p *Policy) For(tool string) Settings {
	if p == nil {
		return defaultSettings()
	}
	for i := range p.rules {
		if p.rules[i].glob.match(tool) {
			return p.rules[i].s
		}
	}
	return p.Defaults
}

// TTL returns the effective task ttl for a request whose params.task.ttl is
// the raw JSON requested (nil or empty when the field is absent). Following
// spec T-28 and notes, the receiver overrides rather than rejects:
//
//   - absent or null: DefaultTTL.
//   - a JSON number: milliseconds, rounded to the nearest integer (half away
//     from zero, so 1.5 -> 2), then clamped to [MinTTL, MaxTTL]; so 0 and
//     negatives give MinTTL and out-of-range values such as 1e300 give MaxTTL.
//   - anything else (a string such as "60000", a bool, an object, malformed
//     JSON): DefaultTTL.
//
// TTL never panics and never overflows. For Settings obtained from a Policy
// the result lies in [MinTTL, MaxTTL] and is a whole number of milliseconds,
// which is what tasks/get reports (T-29).
func (s Settings) TTL(requested json.RawMessage) time.Duration {
	raw := bytes.Trim(requested, " \t\r\n")
	if len(raw) == 0 || !isJSONNumber(raw) {
		return s.DefaultTTL // also covers null
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return s.DefaultTTL // unreachable after isJSONNumber
	}
	// On ErrRange f is ±Inf or ±0, both of which clamp correctly below.
	ms := math.Round(f)
	// Compare in whole milliseconds: both bounds are below 2^53, so the
	// float64 comparisons are exact, and a result strictly between them
	// converts back to a Duration without overflow.
	minMS, maxMS := s.MinTTL.Milliseconds(), s.MaxTTL.Milliseconds()
	switch {
	case !(ms > float64(minMS)): // also NaN, which JSON cannot express
		return s.MinTTL
	case ms >= float64(maxMS):
		return s.MaxTTL
	}
	return time.Duration(ms) * time.Millisecond
}

// isJSONNumber reports whether b is exactly one JSON number (RFC 8259 §6).
func isJSONNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(b)
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// RetriesRequested reports whether the defaults or any rule mark a tool
// idempotent with maxRetries > 0. This version never re-runs lost calls;
// the caller warns operators who asked for it.
func (p *Policy) RetriesRequested() bool {
	if p == nil {
		return false
	}
	if p.Defaults.Idempotent && p.Defaults.MaxRetries > 0 {
		return true
	}
	for _, r := range p.rules {
		if r.s.Idempotent && r.s.MaxRetries > 0 {
			return true
		}
	}
	return false
}

// Patterns returns the rules' patterns in file order, as written: the
// values RuleFor can return.
func (p *Policy) Patterns() []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.rules))
	for i := range p.rules {
		out[i] = p.rules[i].pattern
	}
	return out
}

// RuleFor returns the pattern of the first rule matching tool, as written
// in the file, or "" when none does (Defaults apply). The patterns are a
// bounded set: metrics use them as labels instead of client-chosen tool
// names.
func (p *Policy) RuleFor(tool string) string {
	if p == nil {
		return ""
	}
	for i := range p.rules {
		if p.rules[i].glob.match(tool) {
			return p.rules[i].pattern
		}
	}
	return ""
}
