package squawk

import (
	"regexp"
	"strings"
)

// Secret redaction for the fallback's redacted_message: the port of
// sidecar/core/squawk/policy/redact.py, whose docstring states the rules; the
// "redaction" vectors in tests/vectors/decisions.json pin them.
//
// RE2 has no lookaround and no backreferences, so where a match may start,
// and the parts of a match that look behind, are code (redact_scan.go; rule
// 3, the assignments, is in redact_assignments.go).
// Each rule tries a match at each place one may start, on the text as it
// was before the rule, and goes on after each match, as Python's re.sub
// does. RE2 is linear, and no rule goes back over text it has passed, so
// every rule is linear too. Python's possessive quantifiers are loops that
// never give back what they took.

const redacted = "[REDACTED]"

// redact returns text with every recognised secret replaced by [REDACTED].
func redact(text string) string {
	if text == "" {
		return text
	}
	text = redactPEM(text)
	text = redactURLCredentials(text)
	text = redactAssignments(text)
	text = redactAuthSchemes(text)
	return redactTokens(text)
}

// --- rule 1: PEM private keys ---------------------------------------------------

const pemLabel = `[ A-Z0-9]{0,40}?PRIVATE KEY(?: BLOCK)?-----`

var (
	pemBegin = anchored(`-----BEGIN` + pemLabel)
	pemEnd   = anchored(`-----END` + pemLabel)
)

// redactPEM keeps the BEGIN line and the END line, if any, and redacts
// everything up to the next "-----".
func redactPEM(text string) string {
	return replaceEach(text, nextIndex("-----BEGIN"), func(text string, i int) (int, string, bool) {
		m := pemBegin.FindStringIndex(text[i:])
		if m == nil {
			return 0, "", false
		}
		body := i + m[1]
		end := len(text)
		if k := strings.Index(text[body:], "-----"); k >= 0 {
			end = body + k
		}
		label := ""
		if e := pemEnd.FindStringIndex(text[end:]); e != nil {
			label = text[end : end+e[1]]
		}
		return end + len(label), text[i:body] + redacted + label, true
	})
}

// --- rule 2: credentials inside URLs --------------------------------------------

var urlCredentials = anchored(`([A-Za-z][A-Za-z0-9+.-]*://)[^/` + pySpace + `:@]*:(?:[^/` + pySpace + `@]*@)+`)

func isSchemeChar(b byte) bool { return isAlnum(b) || b == '+' || b == '.' || b == '-' }

// redactURLCredentials tries the start of the run of scheme characters
// before each "://".
func redactURLCredentials(text string) string {
	next := func(text string, from int) int {
		for k := from; ; k++ {
			found := strings.Index(text[k:], "://")
			if found < 0 {
				return -1
			}
			k += found
			start := k
			for start > 0 && isSchemeChar(text[start-1]) {
				start--
			}
			if start >= from {
				return start
			}
		}
	}
	return replaceEach(text, next, func(text string, i int) (int, string, bool) {
		m := urlCredentials.FindStringSubmatchIndex(text[i:])
		if m == nil {
			return 0, "", false
		}
		return i + m[1], text[i:i+m[3]] + redacted + "@", true
	})
}

// --- rule 4: authorization schemes ----------------------------------------------

func redactAuthSchemes(text string) string {
	return replaceEach(text, nextAny("BbTtDd"), authSchemeAt)
}

func isCredentialChar(b byte) bool { return isAlnum(b) || strings.IndexByte("._~+/=-", b) >= 0 }

// authSchemeAt matches a scheme word, whitespace and a credential of 8 or
// more characters that, after Basic, Token or Digest, does not read as a word.
func authSchemeAt(text string, p int) (int, string, bool) {
	if !startsAt(text, p, isTokenChar) {
		return 0, "", false
	}
	k := schemeAt(text, p)
	if k == p {
		return 0, "", false
	}
	e := k
	for e < len(text) && isCredentialChar(text[e]) {
		e++
	}
	// "Bearer" is no English word: what follows it is a credential whatever it reads like.
	bearer := k-p > len("bearer") && strings.EqualFold(text[p:p+len("bearer")], "bearer")
	if e-k < 8 || (!bearer && readsAsWord(text[k:e])) {
		return 0, "", false
	}
	return e, text[p:k] + redacted, true
}

// readsAsWord: lower case (perhaps Capitalised) or ALL CAPS, with symbols
// but no digit.
func readsAsWord(s string) bool {
	lower, upper := true, true
	for i := 0; i < len(s); i++ {
		b, symbol := s[i], strings.IndexByte("._~+/=-", s[i]) >= 0
		lower = lower && (isLower(b) || symbol || (i == 0 && isUpper(b)))
		upper = upper && (isUpper(b) || symbol)
	}
	return lower || upper
}

// --- rule 5: token shapes -------------------------------------------------------

// tokenShapes are sidecar/core/squawk/policy/redact.py's _TOKEN_SHAPES_TABLE: a literal
// prefix and the rest. No two can match at the same place.
var tokenShapes = []struct {
	prefix string
	rest   *regexp.Regexp
	// whole: not followed by A-Za-z0-9_, as (?![A-Za-z0-9_]) says.
	whole bool
}{
	{"sk-", anchored(`[A-Za-z0-9_-]{8,}`), false},
	{"pk-", anchored(`[A-Za-z0-9_-]{8,}`), false},
	{"rk-", anchored(`[A-Za-z0-9_-]{8,}`), false},
	{"sk_", anchored(`(?:live|test)_[A-Za-z0-9]{8,}`), false},
	{"pk_", anchored(`(?:live|test)_[A-Za-z0-9]{8,}`), false},
	{"rk_", anchored(`(?:live|test)_[A-Za-z0-9]{8,}`), false},
	{"whsec_", anchored(`[A-Za-z0-9]{16,}`), false},
	{"gh", anchored(`[pousr]_[A-Za-z0-9_]{16,}`), false},
	{"github_pat_", anchored(`[A-Za-z0-9_]{16,}`), false},
	{"glpat-", anchored(`[A-Za-z0-9_-]{16,}`), false},
	{"xox", anchored(`[abposre]-[A-Za-z0-9-]{8,}`), false},
	{"xapp-", anchored(`[A-Za-z0-9-]{8,}`), false},
	{"AKIA", anchored(`[0-9A-Z]{16}`), true},
	{"ASIA", anchored(`[0-9A-Z]{16}`), true},
	{"AIza", anchored(`[A-Za-z0-9_-]{30,}`), false},
	{"ya29.", anchored(`[A-Za-z0-9_-]{16,}`), false},
	{"eyJ", anchored(`[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`), false},
	{"hf_", anchored(`[A-Za-z0-9]{30,}`), false},
	{"npm_", anchored(`[A-Za-z0-9]{30,}`), false},
	{"SG.", anchored(`[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}`), false},
	{"shp", anchored(`(?:at|ss|ca|pa)_[A-Za-z0-9]{16,}`), false},
	{"do", anchored(`[por]_v1_[A-Za-z0-9]{16,}`), false},
}

var tokenFirstLetters = func() string {
	var letters strings.Builder
	for _, s := range tokenShapes {
		if strings.IndexByte(letters.String(), s.prefix[0]) < 0 {
			letters.WriteByte(s.prefix[0])
		}
	}
	return letters.String()
}()

func redactTokens(text string) string {
	return replaceEach(text, nextAny(tokenFirstLetters), tokenAt)
}

// tokenAt matches a token shape at p, where the character before is none of
// A-Za-z0-9_- and no backslash (or an escape ends there).
func tokenAt(text string, p int) (int, string, bool) {
	if !startsAt(text, p, func(b byte) bool { return isTokenChar(b) || b == '\\' }) {
		return 0, "", false
	}
	for _, s := range tokenShapes {
		if !strings.HasPrefix(text[p:], s.prefix) {
			continue
		}
		rest := p + len(s.prefix)
		m := s.rest.FindStringIndex(text[rest:])
		if m == nil {
			continue
		}
		end := rest + m[1]
		if s.whole && end < len(text) && (isAlnum(text[end]) || text[end] == '_') {
			continue
		}
		return end, redacted, true
	}
	return 0, "", false
}
