package policy

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// glob is a compiled tool-name pattern. Syntax:
//
//	pattern  matches
//	a*c      '*' matches any run of characters, including none and '/'
//	a?c      '?' matches exactly one character (one UTF-8 encoded rune)
//	[abc]    one character from the set; [a-z] a range; [!x] or [^x] negates
//	\c       the character c literally, also inside a class
//
// Inside a class, '-' is literal when it comes first (after any negation) or
// last, and ']' must be escaped. Everything else matches itself. Matching is
// anchored at both ends, linear in len(pattern)*len(name) at worst, and does not
// allocate.
type glob struct {
	toks []token
}

type tokKind uint8

const (
	tokLit   tokKind = iota // lit matches itself
	tokAny                  // ?
	tokStar                 // *
	tokClass                // [...]
)

type token struct {
	kind   tokKind
	neg    bool        // tokClass: negated
	lit    string      // tokLit
	ranges []runeRange // tokClass: inclusive ranges; a single rune is lo == hi
}

type runeRange struct{ lo, hi rune }

// Errors returned by compileGlob; parse wraps them into an *Error.
var (
	errGlobTrailingEscape = errors.New(`pattern ends with an unfinished escape "\"`)
	errGlobUnclosedClass  = errors.New(`character class "[" is not closed by "]"`)
	errGlobEmptyClass     = errors.New(`empty character class (escape a literal "]" as "\]")`)
	errGlobBadRange       = errors.New("character range is reversed (lo > hi)")
)

// compileGlob compiles pattern. It reports malformed classes and escapes.
func compileGlob(pattern string) (glob, error) {
	var (
		toks []token
		lit  strings.Builder
	)
	flush := func() {
		if lit.Len() > 0 {
			toks = append(toks, token{kind: tokLit, lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		switch c := pattern[i]; c {
		case '*':
			flush()
			if n := len(toks); n == 0 || toks[n-1].kind != tokStar { // "**" == "*"
				toks = append(toks, token{kind: tokStar})
			}
			i++
		case '?':
			flush()
			toks = append(toks, token{kind: tokAny})
			i++
		case '[':
			flush()
			t, n, err := compileClass(pattern[i+1:])
			if err != nil {
				return glob{}, err
			}
			toks = append(toks, t)
			i += 1 + n
		case '\\':
			if i+1 == len(pattern) {
				return glob{}, errGlobTrailingEscape
			}
			_, w := utf8.DecodeRuneInString(pattern[i+1:])
			lit.WriteString(pattern[i+1 : i+1+w])
			i += 1 + w
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	return glob{toks: toks}, nil
}

// compileClass compiles the class whose body starts at s (just after '[').
// It returns the token and how many bytes of s it consumed, including ']'.
func compileClass(s string) (token, int, error) {
	t := token{kind: tokClass}
	i := 0
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		t.neg = true
		i++
	}
	start := i
	// next reads one class character at s[i:], honouring escapes.
	next := func() (rune, error) {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				return 0, errGlobTrailingEscape
			}
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		i += w
		return r, nil
	}
	for {
		if i == len(s) {
			return token{}, 0, errGlobUnclosedClass
		}
		if s[i] == ']' {
			if i == start {
				return token{}, 0, errGlobEmptyClass
			}
			return t, i + 1, nil
		}
		lo, err := next()
		if err != nil {
			return token{}, 0, err
		}
		hi := lo
		// A '-' followed by something other than ']' makes a range.
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			i++
			if hi, err = next(); err != nil {
				return token{}, 0, err
			}
			if lo > hi {
				return token{}, 0, errGlobBadRange
			}
		}
		t.ranges = append(t.ranges, runeRange{lo, hi})
	}
}

func (t *token) classMatch(r rune) bool {
	for _, rr := range t.ranges {
		if rr.lo <= r && r <= rr.hi {
			return !t.neg
		}
	}
	return t.neg
}

// match reports whether name matches the whole pattern. It backtracks only to
// the most recent '*', which is sufficient for '*' and single-character tokens.
func (g *glob) match(name string) bool {
	toks := g.toks
	ti, ni := 0, 0
	starTi, starNi := -1, 0
	for {
		if ti < len(toks) {
			t := &toks[ti]
			switch t.kind {
			case tokStar:
				starTi, starNi = ti, ni
				ti++
				continue
			case tokLit:
				if strings.HasPrefix(name[ni:], t.lit) {
					ni += len(t.lit)
					ti++
					continue
				}
			case tokAny:
				if ni < len(name) {
					_, w := utf8.DecodeRuneInString(name[ni:])
					ni += w
					ti++
					continue
				}
			case tokClass:
				if ni < len(name) {
					r, w := utf8.DecodeRuneInString(name[ni:])
					if t.classMatch(r) {
						ni += w
						ti++
						continue
					}
				}
			}
		} else if ni == len(name) {
			return true
		}
		// Mismatch: let the last '*' swallow one more character and retry.
		if starTi < 0 || starNi == len(name) {
			return false
		}
		_, w := utf8.DecodeRuneInString(name[starNi:])
		starNi += w
		ti, ni = starTi+1, starNi
	}
}
