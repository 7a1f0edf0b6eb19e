// Server-sent wait hints (retry-after-ms, Retry-After, grpc-retry-pushback-ms)
// as docs/fallback.md specifies them for the fallback.
import { roundHalfEven } from "./duration";
import { MAX_RETRY_AFTER_MS } from "./fallback_table";

export type HeaderMap = Readonly<Record<string, string>>;

/** Case-insensitive header lookup; `name` is lower case. */
export function header(headers: HeaderMap, name: string): string | undefined {
  if (Object.prototype.hasOwnProperty.call(headers, name)) return headers[name];
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name) return value;
  }
  return undefined;
}

/** The value without the spaces and tabs around it (RFC 9110 OWS). */
export function trimOWS(value: string): string {
  return value.replace(/^[ \t]+|[ \t]+$/g, "");
}

/** The header a server's wait came from. */
export type HintHeader = "retry-after-ms" | "Retry-After" | "grpc-retry-pushback-ms";

/** A server's wait in milliseconds, capped at a day, and the header that asked for it. */
export interface WaitHint {
  readonly ms: number;
  readonly from: HintHeader;
}

/**
 * The wait the server asked for, capped, and the header that gave it:
 * retry-after-ms when it parses, else Retry-After (decimal seconds or
 * IMF-fixdate), else grpc-retry-pushback-ms. A malformed value leaves the
 * next header to decide. `nowMs` (Unix ms) is read only for a date.
 */
export function waitHint(headers: HeaderMap, nowMs: number): WaitHint | undefined {
  const hint = uncappedWaitHint(headers, nowMs);
  return hint === undefined ? undefined : { ms: Math.min(hint.ms, MAX_RETRY_AFTER_MS), from: hint.from };
}

function uncappedWaitHint(headers: HeaderMap, nowMs: number): WaitHint | undefined {
  const millis = header(headers, "retry-after-ms");
  if (millis !== undefined) {
    const ms = decimalWaitMs(trimOWS(millis), 1);
    if (ms !== undefined) return { ms, from: "retry-after-ms" };
  }
  const raw = header(headers, "retry-after");
  if (raw !== undefined) {
    const value = trimOWS(raw);
    const seconds = decimalWaitMs(value, 1000);
    if (seconds !== undefined) return { ms: seconds, from: "Retry-After" };
    const when = parseImfFixdate(value);
    if (when !== undefined) return { ms: Math.max(0, when - nowMs), from: "Retry-After" };
  }
  const pushback = header(headers, "grpc-retry-pushback-ms");
  if (pushback !== undefined) {
    const ms = pushbackMs(trimOWS(pushback));
    if (ms !== undefined) return { ms, from: "grpc-retry-pushback-ms" };
  }
  return undefined;
}

/**
 * A wait of non-negative ASCII decimal units of `unitMs` (retry-after-ms in
 * milliseconds, Retry-After in seconds), a fraction allowed, capped at a day
 * and kept to whole microseconds (half to even), in ms. undefined for a
 * sign, an exponent, NaN or inf.
 */
function decimalWaitMs(value: string, unitMs: number): number | undefined {
  const n = plainDecimal(value);
  if (n === undefined) return undefined;
  // Leading zeros are no digits of the bound: "000...07" is 7.
  if ((value.split(".")[0] ?? "").replace(/^0+/, "").length > 12) return MAX_RETRY_AFTER_MS;
  return roundHalfEven(Math.min(n, MAX_RETRY_AFTER_MS / unitMs) * (unitMs * 1000)) / 1000;
}

/** ASCII digits with an optional fraction ("5", "1.5", ".5", "5."), or undefined. */
export function plainDecimal(value: string): number | undefined {
  return /^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$/.test(value) ? Number(value) : undefined;
}

/**
 * A grpc-retry-pushback-ms value: an optional sign, then ASCII digits.
 * undefined when the value asks not to retry: gRFC A6 reads a negative or
 * unparsable value so ("-0" is zero, a "+" is allowed).
 */
function pushbackMs(value: string): number | undefined {
  const match = /^([+-]?)([0-9]+)$/.exec(value);
  if (match === null) return undefined;
  const ms = Number(match[2]);
  return match[1] === "-" && ms > 0 ? undefined : ms;
}

/** Whether the server's grpc-retry-pushback-ms asks not to retry (gRFC A6 "Pushback"). */
/**
 * The server's x-should-retry, read as the official SDKs read it: exactly
 * "true" or "false" (spaces and tabs around it ignored) says so; anything
 * else, or no header, says nothing (undefined).
 */
export function shouldRetry(headers: HeaderMap): boolean | undefined {
  const value = header(headers, "x-should-retry");
  if (value === undefined) return undefined;
  const word = trimOWS(value);
  return word === "true" ? true : word === "false" ? false : undefined;
}

export function pushbackRefuses(headers: HeaderMap): boolean {
  const value = header(headers, "grpc-retry-pushback-ms");
  return value !== undefined && pushbackMs(trimOWS(value)) === undefined;
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const IMF_FIXDATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) ([A-Z][a-z]{2}) ([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$/;

/** An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110) as Unix ms, or undefined. */
function parseImfFixdate(value: string): number | undefined {
  const m = IMF_FIXDATE.exec(value);
  if (m === null) return undefined;
  const [day, month, year, hour, minute, second] = [
    Number(m[1]),
    MONTHS.indexOf(m[2] as string),
    Number(m[3]),
    Number(m[4]),
    Number(m[5]),
    Number(m[6]),
  ];
  const ms = Date.UTC(year, month, day, hour, minute, second);
  // Date.UTC rolls 31 Feb over into March; a date that does not read back is none.
  const back = new Date(ms);
  if (month < 0 || hour > 23 || minute > 59 || second > 59 || back.getUTCDate() !== day || back.getUTCMonth() !== month) {
    return undefined;
  }
  return ms;
}
