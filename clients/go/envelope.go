package squawk

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// envelope is the component's own retry declaration:
// {"success": false, "error": {"retryable": <JSON bool>, "message": "..."}}.
// Anything else (a top-level retryable, a string error, a missing
// success:false, a null/string/number retryable) declares nothing.
type envelope struct {
	declared  bool
	retryable bool
	message   string
}

func readEnvelope(body []byte) envelope {
	// Skip the parse for bodies that cannot be an object.
	trimmed := bytes.TrimLeft(body, " \t\n\r\v\f")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return envelope{}
	}
	body, ok := decodedBody(body)
	if !ok {
		return envelope{}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(finiteJSON(body), &doc); err != nil {
		return envelope{}
	}
	if success, ok := jsonBool(doc["success"]); !ok || success {
		return envelope{}
	}
	var errObj map[string]json.RawMessage
	if raw := bytes.TrimSpace(doc["error"]); len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &errObj) != nil {
		return envelope{}
	}
	var env envelope
	env.retryable, env.declared = jsonBool(errObj["retryable"])
	if raw := bytes.TrimSpace(errObj["message"]); len(raw) > 0 && raw[0] == '"' {
		var msg string
		if json.Unmarshal(raw, &msg) == nil {
			env.message = msg
		}
	}
	return env
}

// decodedBody is body in UTF-8, decoded as the daemon decodes it (Python's
// json.loads): UTF-16 or UTF-32, little-endian, when the second byte is
// zero (the first is a "{" or a space here, so no other case of Python's
// detection can apply), else UTF-8. ok is false where Python's decoding
// fails.
func decodedBody(body []byte) ([]byte, bool) {
	if len(body) < 4 || body[1] != 0 {
		return surrogatesReplaced(body)
	}
	if body[2] != 0 || body[3] != 0 {
		if len(body)%2 != 0 {
			return nil, false
		}
		units := make([]uint16, len(body)/2)
		for i := range units {
			units[i] = binary.LittleEndian.Uint16(body[2*i:])
		}
		// A lone surrogate, which "surrogatepass" reads, becomes U+FFFD.
		return []byte(string(utf16.Decode(units))), true
	}
	if len(body)%4 != 0 {
		return nil, false
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i += 4 {
		r := binary.LittleEndian.Uint32(body[i:])
		if r > unicode.MaxRune {
			return nil, false
		}
		out = utf8.AppendRune(out, rune(r)) // a surrogate becomes U+FFFD
	}
	return out, true
}

// surrogatesReplaced checks body is UTF-8 as the daemon decodes it (Python's
// json.loads, with "surrogatepass"): a UTF-16 surrogate encoded in UTF-8
// (ED A0..BF 80..BF) is read, and shown as U+FFFD, which has the same
// length; any other invalid byte makes the body no envelope.
func surrogatesReplaced(body []byte) ([]byte, bool) {
	var out []byte
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r != utf8.RuneError || n != 1 {
			i += n
			continue
		}
		if i+2 >= len(body) || body[i] != 0xED || body[i+1] < 0xA0 || body[i+1] > 0xBF || body[i+2] < 0x80 || body[i+2] > 0xBF {
			return nil, false
		}
		if out == nil {
			out = bytes.Clone(body)
		}
		copy(out[i:], "\uFFFD")
		i += 3
	}
	if out == nil {
		return body, true
	}
	return out, true
}

// finiteJSON rewrites the non-finite numbers Python's json.loads reads
// (NaN, Infinity, -Infinity) to 0 outside strings, so that encoding/json
// parses every document the daemon parses. Where they are misplaced, the
// 0 is too, and both refuse the document.
func finiteJSON(body []byte) []byte {
	if !bytes.Contains(body, []byte("NaN")) && !bytes.Contains(body, []byte("Infinity")) {
		return body
	}
	out := make([]byte, 0, len(body))
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			if c == '\\' && i+1 < len(body) {
				out = append(out, c)
				i++
				c = body[i]
			} else if c == '"' {
				inString = false
			}
			out = append(out, c)
			continue
		}
		inString = c == '"'
		if n := nonFiniteAt(body, i); n > 0 {
			out = append(out, '0')
			i += n - 1
			continue
		}
		out = append(out, c)
	}
	return out
}

// nonFiniteAt is the length of the non-finite number Python's json reads
// at i, or 0; "-NaN" it does not read.
func nonFiniteAt(body []byte, i int) int {
	for _, word := range []string{"-Infinity", "Infinity", "NaN"} {
		if bytes.HasPrefix(body[i:], []byte(word)) && (word != "NaN" || i == 0 || body[i-1] != '-') {
			return len(word)
		}
	}
	return 0
}

// jsonBool reads a JSON true or false; ok is false for any other value.
func jsonBool(raw json.RawMessage) (value, ok bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}
