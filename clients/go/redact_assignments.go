package squawk

import "strings"

// Rule 3 of redact.go: name = value, after a secret name.

// nameWords and schemeWords are sidecar/core/squawk/policy/redact.py's _NAME_WORDS and
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
