// Server-sent wait hints (retry-after-ms, Retry-After, grpc-retry-pushback-ms), as in
// sidecar/core/squawk/policy/headers.py. The HTTP-date parser follows Python's
// email.utils.parsedate_to_datetime, which the daemon uses.
import { roundHalfEven } from "./duration";
import { pySplit, pyStrip } from "./pyregex";

export type HeaderMap = Readonly<Record<string, string>>;

/** Case-insensitive header lookup; `name` is lower case. */
export function header(headers: HeaderMap, name: string): string | undefined {
  if (Object.prototype.hasOwnProperty.call(headers, name)) return headers[name];
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name) return value;
  }
  return undefined;
}

/** Plain ASCII digits only, within Python's whitespace: a fraction, a sign or a word is malformed. */
function digits(value: string): number | undefined {
  const v = pyStrip(value);
  return /^[0-9]+$/.test(v) ? Number(v) : undefined;
}

/** A server's hint is capped at a day, as the daemon caps it. */
export const MAX_RETRY_AFTER_MS = 86_400_000;

/** The header a server's wait came from. */
export type HintHeader = "retry-after-ms" | "Retry-After" | "grpc-retry-pushback-ms";

/** A server's wait in milliseconds, capped at a day, and the header that asked for it. */
export interface WaitHint {
  readonly ms: number;
  readonly from: HintHeader;
}

/**
 * The wait the server asked for in milliseconds, capped at a day, or
 * undefined when it asked for none (or sent garbage). `nowMs` is the current
 * Unix time in ms; it is only read for an HTTP-date.
 */
export function retryAfterMs(headers: HeaderMap, nowMs: number): number | undefined {
  return waitHint(headers, nowMs)?.ms;
}

/**
 * retryAfterMs with the header that gave the wait, named where the choice is
 * made so that an explanation cannot credit the wrong one. retry-after-ms
 * wins when it parses, then Retry-After; a malformed one leaves the next
 * header to decide.
 */
export function waitHint(headers: HeaderMap, nowMs: number): WaitHint | undefined {
  const hint = uncappedWaitHint(headers, nowMs);
  return hint === undefined ? undefined : { ms: Math.min(hint.ms, MAX_RETRY_AFTER_MS), from: hint.from };
}

function uncappedWaitHint(headers: HeaderMap, nowMs: number): WaitHint | undefined {
  const millis = header(headers, "retry-after-ms");
  if (millis !== undefined) {
    const ms = retryAfterMsValue(millis);
    if (ms !== undefined) return { ms, from: "retry-after-ms" };
  }
  const value = header(headers, "retry-after");
  if (value !== undefined) {
    const seconds = digits(value);
    if (seconds !== undefined) return { ms: seconds * 1000, from: "Retry-After" };
    const when = parseHttpDate(value);
    if (when !== undefined) {
      // Python's timedelta keeps whole microseconds.
      return { ms: roundHalfEven(Math.max(0, when - nowMs) * 1000) / 1000, from: "Retry-After" };
    }
  }
  const pushback = header(headers, "grpc-retry-pushback-ms");
  if (pushback !== undefined) {
    const ms = pushbackMs(pushback);
    if (ms !== undefined) return { ms, from: "grpc-retry-pushback-ms" };
  }
  return undefined;
}

/**
 * A retry-after-ms value as the daemon reads it (headers.py), the header the
 * OpenAI and Anthropic SDKs read before Retry-After: a plain non-negative
 * ASCII decimal of milliseconds, a fraction allowed, within Python's
 * whitespace, kept to whole microseconds as Python's timedelta keeps it.
 * undefined for a sign, an exponent, NaN or inf; more than 12 whole digits
 * already means over the cap.
 */
function retryAfterMsValue(value: string): number | undefined {
  const match = /^(?:([0-9]+)(?:\.[0-9]*)?|\.[0-9]+)$/.exec(pyStrip(value));
  if (match === null) return undefined;
  if ((match[1] ?? "").length > 12) return MAX_RETRY_AFTER_MS;
  return roundHalfEven(Math.min(Number(match[0]), MAX_RETRY_AFTER_MS) * 1000) / 1000;
}

/**
 * A grpc-retry-pushback-ms value as the daemon reads it (headers.py): an
 * optional sign, then ASCII digits, within Python's whitespace. undefined
 * when the value asks not to retry: gRFC A6 reads a negative or unparsable
 * value so, as grpc-go's strconv.Atoi does ("-0" is zero, a leading "+" is
 * allowed).
 */
function pushbackMs(value: string): number | undefined {
  const match = /^([+-]?)([0-9]+)$/.exec(pyStrip(value));
  if (match === null) return undefined;
  const ms = Number(match[2]);
  return match[1] === "-" && ms > 0 ? undefined : ms;
}

/** Whether the server's grpc-retry-pushback-ms asks not to retry (gRFC A6 "Pushback"). */
export function pushbackRefuses(headers: HeaderMap): boolean {
  const value = header(headers, "grpc-retry-pushback-ms");
  return value !== undefined && pushbackMs(value) === undefined;
}

const MONTHS = [
  "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
  "january", "february", "march", "april", "may", "june", "july", "august", "september",
  "october", "november", "december",
];
const DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const ZONES: Readonly<Record<string, number>> = {
  UT: 0, UTC: 0, GMT: 0, Z: 0, AST: -400, ADT: -300, EST: -500, EDT: -400,
  CST: -600, CDT: -500, MST: -700, MDT: -600, PST: -800, PDT: -700,
};

/** Python's int() on one token: optional sign, digits, single underscores between digits. */
function pyInt(text: string): number | undefined {
  const t = text.trim();
  if (!/^[+-]?[0-9]+(?:_[0-9]+)*$/.test(t)) return undefined;
  return Number(t.replace(/_/g, ""));
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/**
 * RFC 9110's asctime-date, the one form without a zone (it is GMT); a zone
 * left out of any other layout still names no instant.
 */
const ASCTIME =
  /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}$/;
/** A Unicode decimal digit other than 0-9, which Python's int() would read. */
const NON_ASCII_DIGIT = /(?![0-9])\p{Nd}/u;

/**
 * Unix ms of an RFC 5322 / HTTP date that names its time zone, or of an
 * asctime date (GMT), else undefined (garbage, an impossible date, a
 * non-ASCII digit, or "-0000" / no zone: a date without a known zone is
 * ignored, as the daemon ignores it).
 */
export function parseHttpDate(value: string): number | undefined {
  if (NON_ASCII_DIGIT.test(value)) return undefined;
  let data = pySplit(value);
  if (data.length === 0) return undefined;
  const first = data[0] as string;
  if (first.endsWith(",") || DAYS.includes(first.toLowerCase())) {
    data.shift();
  } else {
    const i = first.lastIndexOf(",");
    if (i >= 0) data[0] = first.slice(i + 1);
  }
  if (data.length === 3) {
    // RFC 850 date, deprecated.
    const stuff = (data[0] as string).split("-");
    if (stuff.length === 3) data = [...stuff, ...data.slice(1)];
  }
  if (data.length === 4) {
    const s = data[3] as string;
    let i = s.indexOf("+");
    if (i === -1) i = s.indexOf("-");
    if (i > 0) data = [...data.slice(0, 3), s.slice(0, i), s.slice(i)];
    else data.push("");
  }
  if (data.length < 5) return undefined;
  let [dd, mm, yy, tm, tz] = data.slice(0, 5) as [string, string, string, string, string];
  if (!(dd && mm && yy)) return undefined;
  mm = mm.toLowerCase();
  if (!MONTHS.includes(mm)) {
    [dd, mm] = [mm, dd.toLowerCase()];
    if (!MONTHS.includes(mm)) return undefined;
  }
  let month = MONTHS.indexOf(mm) + 1;
  if (month > 12) month -= 12;
  if (dd.endsWith(",")) dd = dd.slice(0, -1);
  if (yy.indexOf(":") > 0) [yy, tm] = [tm, yy];
  if (yy.endsWith(",")) {
    yy = yy.slice(0, -1);
    if (!yy) return undefined;
  }
  if (!yy || !/^[0-9]/.test(yy)) [yy, tz] = [tz, yy];
  if (tm.endsWith(",")) tm = tm.slice(0, -1);
  let parts = tm.split(":");
  let hhText: string;
  let mmText: string;
  let ssText = "0";
  if (parts.length === 2 || parts.length === 3) {
    [hhText, mmText] = parts as [string, string];
    if (parts.length === 3) ssText = parts[2] as string;
  } else if (parts.length === 1 && tm.includes(".")) {
    // Some non-compliant mailers use '.' between the time's parts.
    parts = tm.split(".");
    if (parts.length !== 2 && parts.length !== 3) return undefined;
    [hhText, mmText] = parts as [string, string];
    if (parts.length === 3) ssText = parts[2] as string;
  } else {
    return undefined;
  }
  let year = pyInt(yy);
  const day = pyInt(dd);
  const hour = pyInt(hhText);
  const minute = pyInt(mmText);
  const second = pyInt(ssText);
  if (year === undefined || day === undefined || hour === undefined || minute === undefined || second === undefined) {
    return undefined;
  }
  if (year < 100) year += year > 68 ? 1900 : 2000;
  let offset: number | undefined;
  const zone = tz.toUpperCase();
  if (Object.prototype.hasOwnProperty.call(ZONES, zone)) {
    offset = ZONES[zone];
  } else {
    offset = pyInt(zone);
    if (offset === 0 && zone.startsWith("-")) offset = undefined;
  }
  // A date without a known zone is naive in Python, and the daemon ignores
  // it unless it is an asctime date.
  if (offset === undefined && ASCTIME.test(pyStrip(value))) offset = 0;
  if (offset === undefined) return undefined;
  const sign = offset < 0 ? -1 : 1;
  const abs = Math.abs(offset);
  const offsetSeconds = sign * (Math.floor(abs / 100) * 3600 + (abs % 100) * 60);
  // datetime's own range checks.
  if (year < 1 || year > 9999 || day < 1 || day > daysInMonth(year, month)) return undefined;
  if (hour > 23 || minute > 59 || second > 59 || hour < 0 || minute < 0 || second < 0) return undefined;
  if (Math.abs(offsetSeconds) >= 86_400) return undefined;
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  return date.getTime() - offsetSeconds * 1000;
}
