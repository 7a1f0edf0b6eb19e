package squawk

import (
	"regexp"
	"strings"
)

// Secret redaction for the fallback's redacted_message: the port of
// sidecar/policy/redact.py. RE2 has no lookahead; the daemon's
// "(?!\[REDACTED\])" guards are reproduced in code.

const redacted = "[REDACTED]"

const secretNames = `api[_-]?key|apikey|x-api-key|access[_-]?key|secret[_-]?key|client[_-]?secret|secret` +
	`|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token` +
	`|password|passwd|pwd|private[_-]?key|session[_-]?id|signature|sig|key`

var (
	// name=value, name: value, "name": "value" for names that hold secrets.
	assignment = regexp.MustCompile(`(?i)(["']?\b(?:` + secretNames + `)\b["']?)` +
		`([` + pySpace + `]*[:=][` + pySpace + `]*)(["']?)([^` + pySpace + `"'&,;}<>]+)`)
	// Authorization schemes: "Bearer <token>", "Basic <b64>", "Token <t>".
	// The token class excludes "[", so an already redacted token never matches.
	authScheme = regexp.MustCompile(`(?i)\b(bearer|basic|token|digest)([` + pySpace + `]+)[A-Za-z0-9._~+/=-]{8,}`)
	// Credentials inside URLs: scheme://user:password@host.
	urlCredentials = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]{1,15}://)[^/` + pySpace + `:@]+:[^/` + pySpace + `@]+@`)
	// Well-known token shapes that need no name in front of them.
	tokenShapes = regexp.MustCompile(`\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}` +
		`|\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}` +
		`|\bxox[abposr]-[A-Za-z0-9-]{8,}` +
		`|\bAKIA[0-9A-Z]{16}\b` +
		`|\bAIza[0-9A-Za-z_-]{30,}` +
		`|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`)
)

// redact returns text with every recognised secret replaced by [REDACTED].
func redact(text string) string {
	if text == "" {
		return text
	}
	text = urlCredentials.ReplaceAllString(text, "${1}"+redacted+"@")
	text = authScheme.ReplaceAllString(text, "${1}${2}"+redacted)
	text = redactAssignments(text)
	return tokenShapes.ReplaceAllLiteralString(text, redacted)
}

// redactAssignments replaces the value of each name=value pair. A value that
// is already [REDACTED] is left alone and scanning goes on right after it,
// as the daemon's negative lookahead does.
func redactAssignments(text string) string {
	var out strings.Builder
	pos := 0
	for pos < len(text) {
		m := assignment.FindStringSubmatchIndex(text[pos:])
		if m == nil {
			break
		}
		valueStart, end := pos+m[8], pos+m[1]
		out.WriteString(text[pos:valueStart])
		if strings.HasPrefix(text[valueStart:end], redacted) {
			out.WriteString(redacted)
			pos = valueStart + len(redacted)
			continue
		}
		out.WriteString(redacted)
		pos = end
	}
	out.WriteString(text[pos:])
	return out.String()
}
