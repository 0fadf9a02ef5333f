package main

import (
	"flag"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// sizeValue is a byte-size flag: plain bytes (4194304) or a number with a
// binary unit (KiB, MiB, GiB: 512KiB, 4MiB) or a decimal one (kB, MB, GB:
// 1000, 1000², 1000³); a space before the unit is allowed. It prints in the
// largest binary unit that divides it exactly (4MiB, 1536KiB, 1000).
type sizeValue int

// sizeUnits are the accepted units, lower-cased, with their factor.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	"kb": 1000, "mb": 1000 * 1000, "gb": 1000 * 1000 * 1000,
}

// parseSize parses a size as sizeValue describes it.
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '-' && i == 0) {
		i++
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	if err != nil || !ok {
		return 0, fmt.Errorf("%q is not a size: give bytes or a number with a unit, e.g. 4MiB, 512KiB or 65536", s)
	}
	if n > math.MaxInt32/unit || n < math.MinInt32/unit {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return int(n * unit), nil
}

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

func (v *sizeValue) String() string {
	n := int(*v)
	for _, u := range []struct {
		name string
		f    int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.f == 0 {
			return strconv.Itoa(n/u.f) + u.name
		}
	}
	return strconv.Itoa(n)
}

func (v *sizeValue) Get() any { return sizeValue(*v) }

// sizeVar defines a size flag with the default def (bytes).
func sizeVar(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var((*sizeValue)(p), name, usage)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// nearestFlag returns the flag of fs whose name is closest to name, or ""
// when none is close: at most a third of the name's letters differ (a typo,
// a letter left out or swapped, '_' for '-'), or name is a prefix of
// exactly one flag.
func nearestFlag(fs *flag.FlagSet, name string) string {
	name = strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	best, bestD := "", len(name)/3+1
	var prefixed []string
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			prefixed = append(prefixed, f.Name)
		}
	})
	if best == "" && len(prefixed) == 1 {
		best = prefixed[0]
	}
	return best
}

// undefinedFlagPrefix starts the flag package's error for a flag it does
// not know; the package has no error value for it, so parseArgs reads the
// name from the text.
const undefinedFlagPrefix = "flag provided but not defined: -"

// withFlagHint adds "did you mean --X?" to the flag package's error for an
// unknown flag when a defined flag is near its name.
func withFlagHint(fs *flag.FlagSet, err error) error {
	name, ok := strings.CutPrefix(err.Error(), undefinedFlagPrefix)
	if !ok {
		return err
	}
	name = strings.TrimLeft(name, "-")
	if near := nearestFlag(fs, name); near != "" {
		return fmt.Errorf("%w (did you mean --%s?)", err, near)
	}
	return err
}

// unknownEnv returns, sorted, the TASKGATE_ variables of environ (NAME=VALUE
// entries) that name no flag of fs, each with the nearest flag's variable
// ("" when none is near). Values are never looked at: they may be secrets.
func unknownEnv(fs *flag.FlagSet, environ []string) [][2]string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	var out [][2]string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, "TASKGATE_")
		if !ok || known[name] {
			continue
		}
		near := ""
		if f := nearestFlag(fs, rest); f != "" {
			near = envName(f)
		}
		out = append(out, [2]string{name, near})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
