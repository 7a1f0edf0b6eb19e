package squawk

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Helpers for redact.go: Python's \s, ASCII classes, and the lookbehinds
// the daemon's patterns use to say where a match may start.

// spaceAt is the width of the whitespace character at i (Python's \s, see
// isPySpace), or 0.
func spaceAt(text string, i int) int {
	if i >= len(text) {
		return 0
	}
	r, n := utf8.DecodeRuneInString(text[i:])
	if isPySpace(r) {
		return n
	}
	return 0
}

// skipSpaces returns the end of the run of whitespace starting at i.
func skipSpaces(text string, i int) int {
	for n := spaceAt(text, i); n > 0; n = spaceAt(text, i) {
		i += n
	}
	return i
}

func isLower(b byte) bool { return b >= 'a' && b <= 'z' }
func isUpper(b byte) bool { return b >= 'A' && b <= 'Z' }
func isDigit(b byte) bool { return b >= '0' && b <= '9' }
func isAlnum(b byte) bool { return isLower(b) || isUpper(b) || isDigit(b) }
func isHex(b byte) bool   { return isDigit(b) || (b|0x20 >= 'a' && b|0x20 <= 'f') }

// isTokenChar is A-Za-z0-9_-, what a token is made of.
func isTokenChar(b byte) bool { return isAlnum(b) || b == '_' || b == '-' }

// afterEscape reports whether text[:i] ends with an escape as repr() and
// JSON write one: \a \b \f \n \r \t \v, \xHH or \uHHHH.
func afterEscape(text string, i int) bool {
	if i >= 2 && text[i-2] == '\\' && strings.IndexByte("abfnrtv", text[i-1]) >= 0 {
		return true
	}
	if i >= 4 && text[i-4:i-2] == `\x` && isHex(text[i-2]) && isHex(text[i-1]) {
		return true
	}
	if i >= 6 && text[i-6:i-4] == `\u` {
		for _, b := range []byte(text[i-4 : i]) {
			if !isHex(b) {
				return false
			}
		}
		return true
	}
	return false
}

// startsAt reports whether a match may start at i: at the start of the
// text, after a character that is not part of it, or after an escape.
func startsAt(text string, i int, partOf func(byte) bool) bool {
	return i == 0 || !partOf(text[i-1]) || afterEscape(text, i)
}

// wordEndsAt reports whether one of words (lower case) ends at end, as
// Python's _word_end: matched ASCII-case-insensitively, and starting the
// text, after a character that is not a letter or digit, after an escape,
// or at a camelCase hump (apiKey, XApiKey).
func wordEndsAt(text string, end int, words []string) bool {
	for _, w := range words {
		s := end - len(w)
		if s < 0 || !strings.EqualFold(text[s:end], w) || !asciiOnly(text[s:end]) {
			continue
		}
		if startsAt(text, s, isAlnum) ||
			(s > 0 && isUpper(text[s]) && (isLower(text[s-1]) || isDigit(text[s-1]))) ||
			(s > 0 && isUpper(text[s]) && isLower(text[s+1]) && isUpper(text[s-1])) {
			return true
		}
	}
	return false
}

// asciiOnly guards EqualFold, which folds the Kelvin sign to k as Python's
// spelled-out classes do not.
func asciiOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// runeLen is the width of the character at i.
func runeLen(text string, i int) int {
	_, n := utf8.DecodeRuneInString(text[i:])
	return n
}

// A matcher tries a match at i; it returns the match's end and replacement.
type matcher func(text string, i int) (end int, repl string, ok bool)

// replaceEach applies a rule: match is tried at each place next gives (the
// first place at or after from where a match may start, or -1), and after
// each match the scan goes on at its end, as Python's re.sub goes on.
func replaceEach(text string, next func(text string, from int) int, match matcher) string {
	var out strings.Builder
	done := 0
	for i := next(text, 0); i >= 0 && i < len(text); {
		end, repl, ok := match(text, i)
		if !ok {
			i = next(text, i+1)
			continue
		}
		out.WriteString(text[done:i])
		out.WriteString(repl)
		done = end
		i = next(text, end)
	}
	if done == 0 {
		return text
	}
	out.WriteString(text[done:])
	return out.String()
}

// everyByte tries a match at every position.
func everyByte(text string, from int) int {
	if from >= len(text) {
		return -1
	}
	return from
}

// nextIndex tries a match where sub starts.
func nextIndex(sub string) func(string, int) int {
	return func(text string, from int) int {
		if from > len(text) {
			return -1
		}
		if k := strings.Index(text[from:], sub); k >= 0 {
			return from + k
		}
		return -1
	}
}

// nextAny tries a match at each of chars (ASCII).
func nextAny(chars string) func(string, int) int {
	return func(text string, from int) int {
		if from > len(text) {
			return -1
		}
		if k := strings.IndexAny(text[from:], chars); k >= 0 {
			return from + k
		}
		return -1
	}
}

// anchored compiles pattern to match only at the start of its input.
func anchored(pattern string) *regexp.Regexp {
	return regexp.MustCompile(`^(?:` + pattern + `)`)
}
