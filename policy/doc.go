// Package policy reads taskgate's policy file, which decides per tool whether
// it may run as an MCP task (execution.taskSupport, spec T-07..T-10) and with
// which limits: ttl default and clamps (T-28..T-31, Q-04, Q-05), pollInterval
// (T-32), the background call's timeout, per-process concurrency (MCP asks
// receivers to cap concurrent tasks) and whether lease recovery may re-run a
// lost call.
//
// The file is YAML; every key is optional and keys are case-sensitive:
//
//	bridgeProtocolVersion: true   # answer 2025-11-25 to older upstreams
//	ownTasks: false               # true: serve tasks even if the upstream declares its own
//	defaults:                     # for tools no rule matches
//	  taskSupport: optional       # forbidden | optional | required
//	  ttl: {default: 1h, min: 1s, max: 24h}   # Go durations, whole ms, > 0
//	  pollInterval: 30s           # bound: a running task reports 5 % of its age
//	  timeout: 30m
//	  maxConcurrent: 0            # 0 = unlimited
//	  idempotent: false
//	  maxRetries: 0               # > 0 only with idempotent: true
//	rules:                        # ordered; the first matching rule wins
//	  - match: "build_*"          # glob on the whole tool name
//	    taskSupport: required
//	    ttl: {max: 6h}
//
// A rule inherits every field it leaves unset from defaults, field by field
// (ttl.max alone keeps defaults' ttl.default and ttl.min), and the result must
// satisfy ttl.min <= ttl.default <= ttl.max. In match, '*' matches any run of
// characters including '/', '?' one character, [abc], [a-z], [!x] a class, and
// '\' escapes the next character. Unknown or duplicate keys, YAML aliases and
// merge keys, and values of the wrong type are errors: Parse reports them as
// an *Error wrapping ErrInvalid with the file, line, column and field path.
//
// Parse and Load validate once; the resulting *Policy is immutable, and
// Policy.For, called on every tools/call, does not allocate.
//
// The IDs cited in this package (T-28, Q-04, ...) are defined in the
// glossary of package proxy's documentation (proxy/doc.go).
package policy
