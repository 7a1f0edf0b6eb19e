// The component's own retry declaration in its error envelope, as in
// sidecar/core/squawk/policy/envelope.py. Only
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

/**
 * `body` with each UTF-16 surrogate encoded in UTF-8 (ED A0..BF 80..BF)
 * replaced by U+FFFD, which has the same length: the daemon decodes with
 * Python's "surrogatepass" and shows such a character as U+FFFD, while any
 * other invalid byte makes the body no envelope.
 */
function surrogatesReplaced(body: Uint8Array): Uint8Array {
  let out: Uint8Array | undefined;
  for (let i = 0; i + 2 < body.length; i++) {
    const [a, b, c] = [body[i] as number, body[i + 1] as number, body[i + 2] as number];
    if (a === 0xed && b >= 0xa0 && b <= 0xbf && c >= 0x80 && c <= 0xbf) {
      out ??= Uint8Array.from(body);
      out.set([0xef, 0xbf, 0xbd], i);
      i += 2;
    }
  }
  return out ?? body;
}

// A lone surrogate, which "surrogatepass" reads, becomes U+FFFD.
const utf16 = new TextDecoder("utf-16le", { ignoreBOM: true });

/**
 * `body` decoded as the daemon decodes it (Python's json.loads): UTF-16 or
 * UTF-32, little-endian, when the second byte is zero (the first is a "{"
 * or a space here, so no other case of Python's detection can apply), else
 * UTF-8. Undefined (or a throw) where Python's decoding fails.
 */
function decodedBody(body: Uint8Array): string | undefined {
  if (body.length < 4 || body[1] !== 0) return decoder.decode(surrogatesReplaced(body));
  if (body[2] !== 0 || body[3] !== 0) return body.length % 2 === 0 ? utf16.decode(body) : undefined;
  if (body.length % 4 !== 0) return undefined;
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  let text = "";
  for (let i = 0; i < body.length; i += 4) {
    const code = view.getUint32(i, true);
    if (code > 0x10ffff) return undefined;
    text += code >= 0xd800 && code <= 0xdfff ? "\ufffd" : String.fromCodePoint(code);
  }
  return text;
}

const NON_FINITE = ["-Infinity", "Infinity", "NaN"] as const;

/**
 * The non-finite numbers Python's json.loads reads (NaN, Infinity,
 * -Infinity) rewritten to 0 outside strings, so that JSON.parse reads every
 * document the daemon reads. Where they are misplaced, the 0 is too, and
 * both refuse the document; "-NaN" neither reads.
 */
function finiteJson(text: string): string {
  if (!text.includes("NaN") && !text.includes("Infinity")) return text;
  let out = "";
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (inString) {
      if (c === "\\" && i + 1 < text.length) {
        out += c + (text[i + 1] as string);
        i++;
        continue;
      }
      inString = c !== '"';
      out += c;
      continue;
    }
    inString = c === '"';
    const word = NON_FINITE.find((w) => text.startsWith(w, i) && (w !== "NaN" || text[i - 1] !== "-"));
    if (word !== undefined) {
      out += "0";
      i += word.length - 1;
      continue;
    }
    out += c;
  }
  return out;
}

export function readEnvelope(body: Uint8Array): Envelope {
  // Skip the JSON parse for bodies that cannot be an object.
  if (body.length === 0 || firstNonSpace(body) !== 0x7b /* { */) return NOTHING;
  let doc: unknown;
  try {
    const text = decodedBody(body);
    if (text === undefined) return NOTHING;
    doc = JSON.parse(finiteJson(text));
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
