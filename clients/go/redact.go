package squawk

import (
	"regexp"
	"strings"
)

// Secret redaction for the fallback's redacted_message: the port of
// sidecar/policy/redact.py, whose docstring states the rules; the
// "redaction" vectors in tests/vectors/decisions.json pin them.
//
// RE2 has no lookaround and no backreferences, so where a match may start,
// and the parts of a match that look behind, are code here (redact_scan.go).
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

// --- rule 3: name = value -------------------------------------------------------

// nameWords and schemeWords are sidecar/policy/redact.py's _NAME_WORDS and
// _SCHEME_WORDS.
var (
	nameWords = []string{
		"key", "apikey", "hapikey", "appkey", "accesskey", "secretkey", "privatekey",
		"secret", "clientsecret",
		"token", "accesstoken", "apitoken", "authtoken", "idtoken", "refreshtoken",
		"sessiontoken",
		"password", "passwd", "pwd", "pass", "passphrase",
		"signature", "sig", "credential", "credentials",
		"auth", "authorization", "jwt", "session", "sessionid", "session_id", "session-id",
		"appid",
	}
	schemeWords = []string{"bearer", "basic", "token", "digest"}
)

func redactAssignments(text string) string {
	return replaceEach(text, everyByte, assignmentAt)
}

// assignmentAt matches at q, right after a secret name: the separator, a
// scheme word that is kept, and the value (see valueAt and nextValues).
func assignmentAt(text string, q int) (int, string, bool) {
	if q == 0 || !isLetter(text[q-1]) {
		return 0, "", false
	}
	i, ok := separatorAt(text, q)
	if !ok || !wordEndsAt(text, q, nameWords) {
		return 0, "", false
	}
	end, open, lone, j, ok := valueAfterScheme(text, i)
	if !ok {
		return 0, "", false
	}
	// A chain of values may end quoted: keep the last value's closing quote.
	end, close := nextValues(text, end, open)
	return end, text[q:j] + open + lone + redacted + close, true
}

// valueAfterScheme matches a value at i, after a scheme word if one is
// there and the value after it matches, else right at i; j is where the
// value starts.
func valueAfterScheme(text string, i int) (end int, open, lone string, j int, ok bool) {
	if j = schemeAt(text, i); j > i {
		if end, open, lone, ok = valueAt(text, j); ok {
			return end, open, lone, j, true
		}
	}
	end, open, lone, ok = valueAt(text, i)
	return end, open, lone, i, ok
}

func isLetter(b byte) bool { return isLower(b) || isUpper(b) }
func isQuote(b byte) bool  { return b == '"' || b == '\'' }

// separatorAt returns the end of the separator at q: a closing quote
// (perhaps escaped) and whitespace, one or more of ":" and "=", perhaps a
// ">", then whitespace.
func separatorAt(text string, q int) (int, bool) {
	k := q
	switch {
	case text[k] == '\\' && k+1 < len(text) && isQuote(text[k+1]):
		k = skipSpaces(text, k+2)
	case isQuote(text[k]):
		k = skipSpaces(text, k+1)
	default:
		k = skipSpaces(text, k)
	}
	if k >= len(text) || (text[k] != ':' && text[k] != '=') {
		return 0, false
	}
	for k < len(text) && (text[k] == ':' || text[k] == '=') {
		k++
	}
	if k < len(text) && text[k] == '>' {
		k++
	}
	return skipSpaces(text, k), true
}

// schemeAt returns the end of a scheme word and the whitespace after it at
// i, or i when there is none.
func schemeAt(text string, i int) int {
	for _, w := range schemeWords {
		end := i + len(w)
		if end <= len(text) && asciiOnly(text[i:end]) && strings.EqualFold(text[i:end], w) {
			if k := skipSpaces(text, end); k > end {
				return k
			}
		}
	}
	return i
}

// valueAt matches a value at i: a quoted string, redacted whole, unless it
// is a secret name followed by a separator; or, where no quoted string
// starts, an unquoted value, perhaps after a quote that is never closed.
func valueAt(text string, i int) (end int, open, lone string, ok bool) {
	q := quoteAt(text, i)
	if q > 0 {
		if e, closed := closedAt(text, i, text[i:i+q]); closed {
			if quotedNameEndsAt(text, e) && separatorFollows(text, e) {
				return 0, "", "", false
			}
			return e, text[i : i+q], "", true
		}
	}
	e := valueCharsEnd(text, i+q)
	if e == i+q {
		return 0, "", "", false
	}
	return e, "", text[i : i+q], true
}

// quoteAt is the length of the quote, perhaps escaped, at i, or 0.
func quoteAt(text string, i int) int {
	switch {
	case i < len(text) && isQuote(text[i]):
		return 1
	case i+1 < len(text) && text[i] == '\\' && isQuote(text[i+1]):
		return 2
	}
	return 0
}

// closedAt returns the end of the quoted string that open starts at i: at
// least one character, a backslash taking the next one with it, on one
// line, up to open again.
func closedAt(text string, i int, open string) (int, bool) {
	k := i + len(open)
	for k < len(text) && !strings.HasPrefix(text[k:], open) && text[k] != '\n' {
		if text[k] == '\\' {
			if k+1 >= len(text) || text[k+1] == '\n' {
				break
			}
			k++
		}
		k += runeLen(text, k)
	}
	if k == i+len(open) || !strings.HasPrefix(text[k:], open) {
		return 0, false
	}
	return k + len(open), true
}

// quotedNameEndsAt reports whether a secret name and a closing quote,
// perhaps escaped, end at e.
func quotedNameEndsAt(text string, e int) bool {
	return (e >= 1 && isQuote(text[e-1]) && wordEndsAt(text, e-1, nameWords)) ||
		(e >= 2 && text[e-2] == '\\' && isQuote(text[e-1]) && wordEndsAt(text, e-2, nameWords))
}

func separatorFollows(text string, e int) bool {
	k := skipSpaces(text, e)
	return k < len(text) && (text[k] == ':' || text[k] == '=')
}

// valueCharsEnd returns the end of the unquoted value at k: up to
// whitespace, a quote, & , ; } < >, or an escaped whitespace or quote; any
// other backslash takes the next character with it.
func valueCharsEnd(text string, k int) int {
	for k < len(text) {
		if text[k] == '\\' {
			if k+1 >= len(text) || strings.IndexByte(`nrtfv"'`, text[k+1]) >= 0 || spaceAt(text, k+1) > 0 {
				break
			}
			k += 1 + runeLen(text, k+1)
			continue
		}
		if spaceAt(text, k) > 0 || strings.IndexByte(`"'&,;}<>`, text[k]) >= 0 {
			break
		}
		k += runeLen(text, k)
	}
	return k
}

// nextValues runs on over the values that follow an unquoted value ending
// in a secret name and a separator, or in a scheme word. It returns the end
// of the last value and its closing quote, if it is quoted (close is the
// quote of the value ending at v).
func nextValues(text string, v int, close string) (int, string) {
	for {
		named := v >= 1 && (text[v-1] == ':' || text[v-1] == '=') && wordEndsAt(text, v-1, nameWords)
		if !named && !wordEndsAt(text, v, schemeWords) {
			return v, close
		}
		k := skipSpaces(text, v)
		if k == v {
			return v, close
		}
		end, open, _, _, ok := valueAfterScheme(text, k)
		if !ok {
			return v, close
		}
		v, close = end, open
	}
}

// --- rule 4: authorization schemes ----------------------------------------------

func redactAuthSchemes(text string) string {
	return replaceEach(text, nextAny("BbTtDd"), authSchemeAt)
}

func isCredentialChar(b byte) bool { return isAlnum(b) || strings.IndexByte("._~+/=-", b) >= 0 }

// authSchemeAt matches a scheme word, whitespace and a credential of 8 or
// more characters that does not read as a word.
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
	if e-k < 8 || readsAsWord(text[k:e]) {
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

// tokenShapes are sidecar/policy/redact.py's _TOKEN_SHAPES_TABLE: a literal
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
