// A spent quota's reset, as docs/fallback.md specifies it: on a 429 without a
// wait hint, the fallback waits until the last quota the server says is spent
// (remaining 0) resets. The families and their order are the policy core's
// (squawk.policy.ratelimit.spent_quota_wait).
import { roundHalfEven } from "./duration";
import { MAX_RETRY_AFTER_MS } from "./fallback_table";
import { header, plainDecimal, trimOWS, type HeaderMap } from "./headers";

// Magnitudes that tell x-ratelimit-reset's forms apart: below EPOCH_SECONDS it
// is delta seconds, below EPOCH_MILLIS epoch seconds, else epoch ms.
const EPOCH_SECONDS = 1e9;
const EPOCH_MILLIS = 1e11;
const MAX_SCALAR_CHARS = 64;
const MAX_LIST_CHARS = 512;
const MAX_LIST_MEMBERS = 16;

/** The wait until the last spent quota resets, in ms, and the header that gives it. */
export interface SpentQuotaWait {
  readonly ms: number;
  readonly from: string;
}

interface QuotaReset {
  readonly spent: boolean;
  /** Seconds from now; undefined when the reset was not read. */
  readonly reset: number | undefined;
  readonly header: string;
}

/**
 * The wait until the last spent quota resets, clamped to [0, a day] and kept to
 * whole microseconds, or undefined when no quota is at remaining 0 with a
 * readable reset. `nowMs` (Unix ms) is read only for the absolute resets.
 */
export function spentQuotaWait(headers: HeaderMap, nowMs: number): SpentQuotaWait | undefined {
  let latest: SpentQuotaWait | undefined;
  for (const q of quotaResets(headers, nowMs)) {
    if (!q.spent || q.reset === undefined || Number.isNaN(q.reset)) continue;
    const seconds = Math.min(Math.max(q.reset, 0), MAX_RETRY_AFTER_MS / 1000);
    const ms = roundHalfEven(seconds * 1e6) / 1000;
    if (latest === undefined || ms > latest.ms) latest = { ms, from: q.header };
  }
  return latest;
}

function quotaResets(headers: HeaderMap, nowMs: number): QuotaReset[] {
  const get = (name: string): string | undefined => header(headers, name);
  const spent = (name: string): boolean => {
    const value = get(name);
    return value !== undefined && scalarDecimal(value) === 0;
  };
  const read = <T>(value: string | undefined, parse: (v: string) => T | undefined): T | undefined =>
    value === undefined ? undefined : parse(value);
  const out: QuotaReset[] = [];
  for (const kind of ["requests", "tokens"]) {
    const name = `x-ratelimit-reset-${kind}`;
    out.push({ spent: spent(`x-ratelimit-remaining-${kind}`), reset: read(get(name), goDuration), header: name });
  }
  for (const kind of ["requests", "tokens", "input-tokens", "output-tokens"]) {
    const prefix = `anthropic-ratelimit-${kind}`;
    const reset = read(get(`${prefix}-reset`), (v) => rfc3339From(v, nowMs));
    out.push({ spent: spent(`${prefix}-remaining`), reset, header: `${prefix}-reset` });
  }
  for (const params of sfMembers(get("ratelimit"))) {
    const r = read(params.get("r"), sfInteger);
    out.push({ spent: r === 0, reset: read(params.get("t"), sfInteger), header: "RateLimit" });
  }
  out.push({
    spent: spent("ratelimit-remaining"),
    reset: read(get("ratelimit-reset"), scalarDecimal),
    header: "RateLimit-Reset",
  });
  for (const prefix of ["x-ratelimit", "x-rate-limit"]) {
    const isSpent = spent(`${prefix}-remaining`);
    const after = read(get(`${prefix}-reset-after`), scalarDecimal);
    if (after !== undefined) {
      out.push({ spent: isSpent, reset: after, header: `${prefix}-reset-after` });
    } else {
      const reset = read(get(`${prefix}-reset`), (v) => epochOrDelta(v, nowMs));
      out.push({ spent: isSpent, reset, header: `${prefix}-reset` });
    }
  }
  return out;
}

/** A plain non-negative decimal of at most 64 characters, spaces and tabs around it ignored. */
function scalarDecimal(value: string): number | undefined {
  return value.length > MAX_SCALAR_CHARS ? undefined : plainDecimal(trimOWS(value));
}

/** time.ParseDuration's units, in seconds. */
const GO_UNITS: ReadonlyMap<string, number> = new Map([
  ["h", 3600],
  ["m", 60],
  ["s", 1],
  ["ms", 1e-3],
  ["us", 1e-6],
  ["\u00b5s", 1e-6],
  ["\u03bcs", 1e-6],
  ["ns", 1e-9],
]);

/**
 * OpenAI's reset: a Go duration without a sign ("1s", "6m0s", "1h2m3.5s",
 * "20ms"), or a bare decimal read as seconds.
 */
function goDuration(raw: string): number | undefined {
  if (raw.length > MAX_SCALAR_CHARS) return undefined;
  const value = trimOWS(raw);
  const bare = plainDecimal(value);
  if (bare !== undefined) return bare;
  if (value === "") return undefined;
  const isNumber = (c: string): boolean => c === "." || (c >= "0" && c <= "9");
  let total = 0;
  let i = 0;
  while (i < value.length) {
    const start = i;
    while (i < value.length && isNumber(value.charAt(i))) i++;
    const n = plainDecimal(value.slice(start, i));
    const unitStart = i;
    while (i < value.length && !isNumber(value.charAt(i))) i++;
    const scale = GO_UNITS.get(value.slice(unitStart, i));
    if (n === undefined || scale === undefined) return undefined;
    total += n * scale;
  }
  return total;
}

const RFC3339 =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))$/;

/**
 * Anthropic's reset, an RFC 3339 time with a zone ("2024-05-01T12:00:30Z",
 * "...+01:00", a fraction allowed), as seconds from now.
 */
function rfc3339From(raw: string, nowMs: number): number | undefined {
  if (raw.length > MAX_SCALAR_CHARS) return undefined;
  const m = RFC3339.exec(trimOWS(raw));
  if (m === null) return undefined;
  const [year, month, day, hour, minute, second] = [1, 2, 3, 4, 5, 6].map((k) => Number(m[k]));
  const offsetMinutes = m[8] === "Z" ? 0 : (m[9] === "-" ? -1 : 1) * (Number(m[10]) * 60 + Number(m[11]));
  if (month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59 || Number(m[10] ?? 0) > 23 || Number(m[11] ?? 0) > 59) {
    return undefined;
  }
  const utc = Date.UTC(year, month - 1, day, hour, minute, second);
  // Date.UTC rolls 31 February over into March; a date that does not read back is none.
  if (new Date(utc).getUTCDate() !== day) return undefined;
  const fraction = m[7] === undefined ? 0 : Number(`0${m[7]}`);
  return (utc - nowMs) / 1000 + fraction - offsetMinutes * 60;
}

/** x-ratelimit-reset by its magnitude: delta seconds (Reddit), epoch seconds (GitHub, X, Discord) or epoch ms. */
function epochOrDelta(value: string, nowMs: number): number | undefined {
  const n = scalarDecimal(value);
  if (n === undefined || n < EPOCH_SECONDS) return n;
  return (n >= EPOCH_MILLIS ? n / 1000 : n) - nowMs / 1000;
}

/** A non-negative structured-field Integer (RFC 9651: at most 15 digits), as the IETF draft defines r and t. */
function sfInteger(raw: string): number | undefined {
  const value = trimOWS(raw);
  return /^[0-9]{1,15}$/.test(value) ? Number(value) : undefined;
}

/**
 * A structured-field list read loosely: each member's parameters, split on ","
 * and ";" outside quoted strings, quotes around a value dropped. Empty when the
 * value is over 512 characters; at most 16 members.
 */
function sfMembers(value: string | undefined): Map<string, string>[] {
  if (value === undefined || value.length > MAX_LIST_CHARS) return [];
  const members: Map<string, string>[] = [];
  let parts: string[] = [];
  let piece = "";
  let quoted = false;
  for (const c of value + ",") {
    if (c === '"') {
      quoted = !quoted;
    } else if (!quoted && (c === "," || c === ";")) {
      parts.push(piece.trim());
      piece = "";
      if (c === ",") {
        const params = new Map<string, string>();
        for (const param of parts.slice(1)) {
          const eq = param.indexOf("=");
          const key = eq < 0 ? param : param.slice(0, eq);
          const text = eq < 0 ? "" : param.slice(eq + 1);
          params.set(key.trim(), text.trim().replace(/^"+|"+$/g, ""));
        }
        members.push(params);
        parts = [];
        if (members.length === MAX_LIST_MEMBERS) break;
      }
      continue;
    }
    piece += c;
  }
  return members;
}
