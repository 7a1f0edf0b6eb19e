// The component's own retry declaration in its error envelope, as in
// sidecar/policy/envelope.py. Only
//   {"success": false, "error": {"retryable": <JSON bool>, ...}}
// declares anything; omitted policy is distinct from false.

export interface Envelope {
  /** error.retryable when it is a JSON boolean, else undefined. */
  readonly retryable: boolean | undefined;
  /** error.message when it is a string, else "". */
  readonly message: string;
}

const NOTHING: Envelope = Object.freeze({ retryable: undefined, message: "" });
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function firstNonSpace(body: Uint8Array): number | undefined {
  // bytes.lstrip(): ASCII whitespace only.
  for (const b of body) {
    if (b !== 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d && b !== 0x0b && b !== 0x0c) return b;
  }
  return undefined;
}

export function readEnvelope(body: Uint8Array): Envelope {
  // Skip the JSON parse for bodies that cannot be an object.
  if (body.length === 0 || firstNonSpace(body) !== 0x7b /* { */) return NOTHING;
  let doc: unknown;
  try {
    doc = JSON.parse(decoder.decode(body));
  } catch {
    return NOTHING;
  }
  if (!isObject(doc) || doc["success"] !== false) return NOTHING;
  const error = doc["error"];
  if (!isObject(error)) return NOTHING;
  const declared = error["retryable"];
  const message = error["message"];
  return {
    retryable: typeof declared === "boolean" ? declared : undefined,
    message: typeof message === "string" ? message : "",
  };
}
