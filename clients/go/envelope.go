package squawk

import (
	"bytes"
	"encoding/json"
)

// notRetryable reports whether body is the component's own "do not retry"
// declaration, {"success": false, "error": {"retryable": false, ...}}, as
// encoding/json reads it (docs/fallback.md). Anything else (a body that is
// not a JSON object, a top-level retryable, a string error, a missing
// success:false, a retryable that is not the JSON literal false) declares
// nothing. Maps, not structs: encoding/json matches struct fields without
// regard to case, and the keys are exact.
func notRetryable(body []byte) bool {
	var doc, errObj map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil || !isJSON(doc["success"], "false") {
		return false
	}
	trimmed := bytes.TrimSpace(doc["error"])
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &errObj) != nil {
		return false
	}
	return isJSON(errObj["retryable"], "false")
}

func isJSON(raw json.RawMessage, literal string) bool {
	return string(bytes.TrimSpace(raw)) == literal
}
