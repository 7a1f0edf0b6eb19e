// The component's own "do not retry" declaration in a response body, as
// docs/fallback.md specifies it for the fallback.

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// UTF-8 with U+FFFD for invalid bytes, as Go's encoding/json reads them; a
// byte-order mark is kept, so that JSON.parse refuses it as Go does.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * Whether `body` is {"success": false, "error": {"retryable": false, ...}}
 * as JSON.parse reads it. Anything else (not a JSON object, a top-level
 * retryable, a string error, a missing success:false, a retryable that is
 * not the JSON literal false) declares nothing.
 */
export function declaresNotRetryable(body: Uint8Array): boolean {
  let doc: unknown;
  try {
    doc = JSON.parse(decoder.decode(body));
  } catch {
    return false;
  }
  if (!isObject(doc) || doc["success"] !== false) return false;
  const error = doc["error"];
  return isObject(error) && error["retryable"] === false;
}
