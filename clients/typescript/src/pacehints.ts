// What a success tells the pod's pace beside its latency: the rate-limit
// headers of its response, read by the caller's headersOf hook.

import type { HeaderSource } from "./steperror";

/** The daemon's bounds on Outcome.headers (squawk.policy.limits). */
const MAX_HEADERS = 64;
const MAX_HEADER_NAME_CHARS = 256;
const MAX_HEADER_VALUE_CHARS = 8192;
/** How many of a result's headers are looked at, at most: a flood is cut here. */
const MAX_HEADERS_SCANNED = 1024;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** At most `max` characters (code points, as the daemon counts them), valid UTF-8 once encoded. */
function fits(text: string, max: number): boolean {
  // A string of n UTF-16 units holds n/2 to n code points.
  if (text.length > 2 * max) return false;
  if (LONE_SURROGATE.test(text)) return false;
  return text.length <= max || [...text].length <= max;
}

/** Each of the first `limit` entries of `headers` (a plain object, or anything with forEach), until `take` answers false. */
function scan(headers: HeaderSource, limit: number, take: (name: unknown, value: unknown) => boolean): void {
  let scanned = 0;
  const visit = (name: unknown, value: unknown): boolean => scanned++ < limit && take(name, value);
  if (typeof headers.forEach === "function") {
    // forEach cannot be stopped: past the limit each entry costs a count.
    let open = true;
    (headers as { forEach(callback: (value: unknown, key: unknown) => void): void }).forEach((value, key) => {
      open &&= visit(key, value);
    });
    return;
  }
  for (const name in headers) {
    if (Object.prototype.hasOwnProperty.call(headers, name) && !visit(name, (headers as Record<string, unknown>)[name])) return;
  }
}

/**
 * The rate-limit headers of a success, as `headersOf` reads them from its
 * result, for the pod's pace (Outcome.headers): the names holding
 * "ratelimit" or "rate-limit" (in any case) whose name and value are
 * strings within the daemon's bounds, at most 64 of the first 1,024
 * entries, so that a header flood or one odd value never gets a batch of
 * outcomes refused; none when the hook throws. The Python runner's
 * headers_of and the Go runner's RateLimitHeaderer read the same.
 */
export function paceHeaders<R>(
  headersOf: ((result: R) => HeaderSource) | undefined,
  result: R,
): Record<string, string> {
  const kept: Record<string, string> = {};
  if (headersOf === undefined) return kept;
  try {
    const headers = headersOf(result);
    if (typeof headers !== "object" || headers === null) return {};
    let count = 0;
    scan(headers, MAX_HEADERS_SCANNED, (name, value) => {
      if (typeof name !== "string" || typeof value !== "string") return true;
      const lower = name.toLowerCase();
      if (!(lower.includes("ratelimit") || lower.includes("rate-limit"))) return true;
      if (!fits(name, MAX_HEADER_NAME_CHARS) || !fits(value, MAX_HEADER_VALUE_CHARS)) return true;
      if (!Object.prototype.hasOwnProperty.call(kept, name)) count++;
      kept[name] = value;
      return count < MAX_HEADERS;
    });
  } catch {
    return {};
  }
  return kept;
}
