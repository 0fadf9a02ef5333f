package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// modulePath is this module's path; TestImportRules checks it against go.mod.
const modulePath = "github.com/taskgate/taskgate"

// An importRule says what the packages it covers may not depend on, directly
// or through other packages. Paths are relative to the module ("proxy",
// "taskstore/...") unless they name another module ("github.com/..."); a
// trailing "/..." also covers the packages below, and "..." alone is every
// package of the module. Only the packages' own (non-test) imports count:
// tests may import what they need.
type importRule struct {
	pkgs   []string // the packages the rule covers
	except []string // packages among pkgs it does not cover
	// forbid lists what they may not depend on (their own subtree aside).
	forbid []string
	// leavesOnly lists packages they may depend on only when those are
	// leaves: packages that import nothing of this module (such as a JSON
	// or SSE primitive).
	leavesOnly []string
	// future marks a rule for a package that need not exist yet; the others
	// fail when nothing matches them, so a rename cannot empty a rule.
	future bool
	why    string
}

const fasthttpPath = "github.com/valyala/fasthttp/..."

// importRules is the dependency structure of taskgate. To add a rule, add an
// entry; TestImportRuleChecker checks that every entry can fail.
var importRules = []importRule{
	{
		pkgs: []string{"..."}, except: []string{"proxy", "cmd/..."},
		forbid: []string{"proxy"},
		why:    "the handler package is the top of the tree: only the commands build on it",
	},
	{
		pkgs: []string{"..."}, except: []string{"proxy/...", "cmd/..."},
		forbid: []string{"proxy/..."},
		why:    "no arrow back up: the store, the policy and the capability rewrites are below the proxy; tools they share (capability/jsonx) live beside them, and only the commands compose proxy's parts",
	},
	{
		pkgs:   []string{"taskstore/..."},
		forbid: []string{fasthttpPath, "policy/...", "cmd/...", "proxy/..."}, leavesOnly: []string{"capability/jsonx/..."},
		why: "the store keeps tasks, outcomes and bytes: it knows no HTTP, no tool policy and no wire (callers say what a message is)",
	},
	{
		pkgs:   []string{"policy/..."},
		forbid: []string{fasthttpPath, "taskstore/...", "cmd/...", "proxy/..."}, leavesOnly: []string{"capability/jsonx/..."},
		why: "the policy is a parsed file: it knows no HTTP, no store and no wire",
	},
	{
		pkgs:   []string{"capability/..."},
		forbid: []string{fasthttpPath, "taskstore/...", "policy/...", "cmd/...", "proxy/..."},
		why:    "the capability rewrites are pure functions on the bytes of one answer",
	},
	{
		pkgs:   []string{"proxy/wire/v20260728/schema/..."},
		forbid: []string{fasthttpPath, "..."},
		why:    "the 2026-07-28 wire's shapes: the HTTP layer renders them, they speak no HTTP and need nothing of taskgate",
	},
	{
		pkgs:   []string{"proxy/engine/..."},
		forbid: []string{fasthttpPath, "github.com/prometheus/...", "go.opentelemetry.io/...", "proxy/...", "proxy/wire/...", "capability/...", "cmd/..."},
		why: "the task engine knows no wire: not fasthttp, not the wire eras (proxy/wire/...) or their JSON shapes or scanner, not the upstream's transport " +
			"(it calls the upstream through its own Upstream interface) and no metrics or tracing library (it reports through Hooks)",
	},
	{
		pkgs:   []string{"proxy/wire/..."},
		forbid: []string{"proxy", "cmd/...", "proxy/stdio/...", "proxy/admin/..."},
		why: "the wire eras sit below the front: they reach its pass-through, identity and logging only through " +
			"the hooks of wire.Front, so an era cannot grow a dependency on the front's internals",
	},
	{
		pkgs:   []string{"proxy/wire/v20251125/..."},
		forbid: []string{"proxy/wire/v20260728/..."},
		why:    "each era is its own package behind the seam of package wire: what two eras share lives in wire",
	},
	{
		pkgs:   []string{"proxy/wire/v20260728/..."},
		forbid: []string{"proxy/wire/v20251125/..."},
		why:    "each era is its own package behind the seam of package wire: what two eras share lives in wire",
	},
	{
		pkgs:   []string{"proxy/upstream/..."},
		forbid: []string{"taskstore/...", "policy/...", "capability/...", "proxy/engine/...", "proxy/wire/v20260728/schema/...", "proxy/stdio/..."},
		why:    "the upstream client is transport: it knows no task store, no policy, no engine and no client-side wire",
	},
	{
		pkgs:   []string{"proxy/sse/..."},
		forbid: []string{"taskstore/...", "policy/...", "capability/..."}, leavesOnly: []string{"..."},
		why: "the SSE reader and writer are a primitive: they know no tasks and build on leaves only",
	},
	{
		pkgs:   []string{"capability/jsonx/..."},
		forbid: []string{"...", fasthttpPath},
		why:    "the JSON scanner and editor are the bottom of the tree: nothing of taskgate, no HTTP",
	},
	{
		pkgs:   []string{"proxy/sysconn/..."},
		forbid: []string{"..."},
		why:    "direct socket system calls: nothing of taskgate",
	},
	{
		pkgs:   []string{"proxy/sched/..."},
		forbid: []string{"..."},
		why:    "thread scheduling policy system calls: nothing of taskgate",
	},
	{
		pkgs:   []string{"proxy/tracing/..."},
		forbid: []string{"policy/...", "capability/...", "proxy/engine/...", "proxy/upstream/...", "proxy/wire/v20260728/schema/...", "proxy/stdio/...", "cmd/..."},
		why:    "tracing makes spans from what its callers tell it and wraps the store: it knows no policy, engine, wire or transport",
	},
	{
		pkgs:   []string{"proxy/stdio/..."},
		forbid: []string{"taskstore/...", "policy/...", "capability", "proxy/engine/...", "proxy/upstream/...", "proxy/wire/v20260728/schema/..."}, leavesOnly: []string{"capability/jsonx/..."},
		why: "a stdio server is reached as an HTTP endpoint through Config.Dial: it knows nothing of tasks",
	},
}

// goPackage is what the checker needs of `go list -json`.
type goPackage struct {
	ImportPath string
	Deps       []string // every package it depends on, transitively
}

// fullPath turns a rule path into an import path pattern.
func fullPath(mod, p string) string {
	switch {
	case p == "...":
		return mod + "/..."
	case strings.Contains(strings.SplitN(p, "/", 2)[0], "."):
		return p // another module
	default:
		return mod + "/" + p
	}
}

// matchPath reports whether the import path matches the pattern (an import
// path, or one ending in "/..." for it and the packages below).
func matchPath(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func matchAny(mod string, patterns []string, path string) bool {
	for _, p := range patterns {
		if matchPath(fullPath(mod, p), path) {
			return true
		}
	}
	return false
}

// importViolations checks rules against the packages of module mod. It
// returns the violations, sorted, and how many packages each rule covers.
func importViolations(mod string, rules []importRule, pkgs map[string]goPackage) (violations []string, covered []int) {
	ours := func(path string) bool { return matchPath(mod+"/...", path) }
	leaf := func(path string) bool {
		p, ok := pkgs[path]
		return ok && !slices.ContainsFunc(p.Deps, ours)
	}
	paths := make([]string, 0, len(pkgs))
	for path := range pkgs {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	covered = make([]int, len(rules))
	for i, r := range rules {
		for _, path := range paths {
			if !matchAny(mod, r.pkgs, path) || matchAny(mod, r.except, path) {
				continue
			}
			covered[i]++
			// A package may always use its own subtree: the rule's pattern
			// that covers it, or the package and those below it.
			own := func(dep string) bool {
				if matchPath(path+"/...", dep) {
					return true
				}
				for _, p := range r.pkgs {
					if fp := fullPath(mod, p); strings.HasSuffix(fp, "/...") && fp != mod+"/..." && matchPath(fp, path) && matchPath(fp, dep) {
						return true
					}
				}
				return false
			}
			for _, dep := range pkgs[path].Deps {
				switch {
				case own(dep):
				case matchAny(mod, r.forbid, dep):
					violations = append(violations, fmt.Sprintf("%s depends on %s: %s", path, dep, r.why))
				case matchAny(mod, r.leavesOnly, dep) && !leaf(dep):
					violations = append(violations, fmt.Sprintf("%s depends on %s, which is not a leaf (it imports packages of this module): %s", path, dep, r.why))
				}
			}
		}
	}
	sort.Strings(violations)
	return violations, covered
}

// listPackages runs `go list -json ./...` in the module at root.
func listPackages(t *testing.T, root string) map[string]goPackage {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(gobin, "list", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]goPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// TestImportRules: the module's packages keep the dependency rules of
// importRules.
func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(gomod, []byte("module "+modulePath+"\n")) {
		t.Fatalf("go.mod does not declare module %s", modulePath)
	}
	pkgs := listPackages(t, root)
	if _, ok := pkgs[modulePath+"/proxy"]; !ok || len(pkgs) < 5 {
		t.Fatalf("go list found %d packages, not this module's", len(pkgs))
	}
	violations, covered := importViolations(modulePath, importRules, pkgs)
	for _, v := range violations {
		t.Error(v)
	}
	for i, r := range importRules {
		switch {
		case covered[i] > 0:
		case r.future:
			t.Logf("rule for %v: no such package yet", r.pkgs)
		default:
			t.Errorf("rule for %v covers no package: renamed? update importRules", r.pkgs)
		}
	}
}

// TestImportRuleChecker: every forbidden dependency of every rule is
// reported, in a made-up graph where a covered package has exactly that
// dependency, and so is a non-leaf where only leaves may go; leaves and a
// package's own subtree are allowed.
func TestImportRuleChecker(t *testing.T) {
	const mod = "example.com/m"
	concrete := func(p string) string {
		if p == "..." {
			return mod + "/somewhere"
		}
		return strings.TrimSuffix(fullPath(mod, p), "/...")
	}
	for i, r := range importRules {
		from := concrete(r.pkgs[0])
		if matchAny(mod, r.except, from) {
			t.Fatalf("rule %d: test package %s is excepted", i, from)
		}
		for _, f := range r.forbid {
			to := concrete(f)
			if to == from || matchPath(from+"/...", to) {
				to = mod + "/elsewhere" // "..." forbids everything: any other package of ours
			}
			graph := map[string]goPackage{
				from: {ImportPath: from, Deps: []string{"fmt", to}},
				to:   {ImportPath: to},
			}
			v, covered := importViolations(mod, []importRule{r}, graph)
			if covered[0] != 1 || len(v) != 1 || !strings.HasPrefix(v[0], from+" depends on "+to+":") {
				t.Errorf("rule %v, forbidden %s: violations %q (covering %d), want one for %s -> %s", r.pkgs, f, v, covered[0], from, to)
			}
		}
		for _, l := range r.leavesOnly {
			dep := concrete(l) + "/json"
			// A leaf is allowed, and so is the package's own subtree.
			graph := map[string]goPackage{
				from:             {ImportPath: from, Deps: []string{dep, from + "/sub"}},
				dep:              {ImportPath: dep, Deps: []string{"strconv"}},
				from + "/sub":    {ImportPath: from + "/sub"},
				mod + "/unknown": {ImportPath: mod + "/unknown"},
			}
			if v, _ := importViolations(mod, []importRule{r}, graph); len(v) != 0 {
				t.Errorf("rule %v: a leaf %s and the own subtree are refused: %q", r.pkgs, dep, v)
			}
			// The same package importing one of ours is no leaf.
			graph[dep] = goPackage{ImportPath: dep, Deps: []string{mod + "/unknown"}}
			graph[from] = goPackage{ImportPath: from, Deps: []string{dep, mod + "/unknown"}}
			v, _ := importViolations(mod, []importRule{r}, graph)
			if !slices.ContainsFunc(v, func(s string) bool { return strings.HasPrefix(s, from+" depends on "+dep+", which is not a leaf") }) {
				t.Errorf("rule %v: a non-leaf %s is not reported: %q", r.pkgs, dep, v)
			}
		}
		// A package may always use its own subtree, even where a rule
		// forbids every package of the module.
		sub := from + "/sub"
		graph := map[string]goPackage{
			from: {ImportPath: from, Deps: []string{sub, mod + "/proxy/sysconn"}},
			sub:  {ImportPath: sub, Deps: []string{mod + "/proxy/sysconn"}},
		}
		if v, _ := importViolations(mod, []importRule{{pkgs: r.pkgs, forbid: r.forbid, leavesOnly: r.leavesOnly, why: r.why}}, graph); slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, " depends on "+sub) }) {
			t.Errorf("rule %v: its own subtree %s is refused: %q", r.pkgs, sub, v)
		}
		if len(r.forbid)+len(r.leavesOnly) == 0 {
			t.Errorf("rule %v forbids nothing", r.pkgs)
		}
	}
	// The top rule: the commands may import proxy, nothing else may.
	graph := map[string]goPackage{
		mod + "/proxy":                       {ImportPath: mod + "/proxy"},
		mod + "/cmd/taskgate":                {ImportPath: mod + "/cmd/taskgate", Deps: []string{mod + "/proxy"}},
		mod + "/proxy/engine":                {ImportPath: mod + "/proxy/engine", Deps: []string{mod + "/proxy"}},
		mod + "/proxy/wire/v20260728/schema": {ImportPath: mod + "/proxy/wire/v20260728/schema", Deps: []string{"github.com/valyala/fasthttp"}},
		mod + "/taskstore/inner":             {ImportPath: mod + "/taskstore/inner", Deps: []string{mod + "/taskstore"}},
		mod + "/taskstore":                   {ImportPath: mod + "/taskstore"},
	}
	why := func(pkg string) string {
		for _, r := range importRules {
			if r.pkgs[0] == pkg {
				return r.why
			}
		}
		t.Fatalf("no rule for %s", pkg)
		return ""
	}
	v, _ := importViolations(mod, importRules, graph)
	want := []string{
		mod + "/proxy/engine depends on " + mod + "/proxy: " + why("..."),
		mod + "/proxy/engine depends on " + mod + "/proxy: " + why("proxy/engine/..."),
		mod + "/proxy/wire/v20260728/schema depends on github.com/valyala/fasthttp: " + why("proxy/wire/v20260728/schema/..."),
	}
	if !slices.Equal(v, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(v, "\n"), strings.Join(want, "\n"))
	}
}
