// Classification under the built-in "default" profile, as in
// sidecar/core/squawk/policy/classify.py.
import { durationFromMs } from "./duration";
import { ErrorCategory, type ClassifyResponse } from "./gen/squawk/v1/policy";
import { retryAfterMs, type HeaderMap } from "./headers";
import { SquawkInputError } from "./errors";
import { S } from "./pyregex";
import { redact } from "./redact";

/** 408, 429 and every 5xx: resent unchanged by the default profile. */
export function isTransientStatus(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status <= 599);
}

/** 401, 403, 405: retrying cannot help. */
export function isTerminalStatus(status: number): boolean {
  return status === 401 || status === 403 || status === 405;
}

export function checkStatus(status: number, field = "http_status"): void {
  if (status !== 0 && !(status >= 100 && status <= 599)) {
    throw new SquawkInputError(field, `${field}: ${status} is not an HTTP status (0 or 100..599)`);
  }
}

// The digits may not continue ("code: 12345" is no status); only 100..599 counts.
const STATUS_IN_TEXT = new RegExp(`(?:status|error|code)(?::|${S})+([0-9]{3})(?![0-9])`, "giu");

/** The first real HTTP status named in an error text, or 0. */
export function statusFromText(message: string): number {
  for (const match of message.matchAll(STATUS_IN_TEXT)) {
    const status = Number(match[1]);
    if (status >= 100 && status <= 599) return status;
  }
  return 0;
}

type Row = readonly [status: number, category: ErrorCategory, code: string];

const TABLE: ReadonlyMap<number, Row> = new Map<number, Row>([
  [400, [400, ErrorCategory.ERROR_CATEGORY_INPUT_ERROR, "INVALID_INPUT"]],
  [401, [401, ErrorCategory.ERROR_CATEGORY_AUTH_ERROR, "UNAUTHORIZED"]],
  [403, [403, ErrorCategory.ERROR_CATEGORY_AUTH_ERROR, "FORBIDDEN"]],
  [404, [400, ErrorCategory.ERROR_CATEGORY_INPUT_ERROR, "NOT_FOUND"]],
  [405, [405, ErrorCategory.ERROR_CATEGORY_INPUT_ERROR, "METHOD_NOT_ALLOWED"]],
  [408, [502, ErrorCategory.ERROR_CATEGORY_SERVICE_ERROR, "UPSTREAM_TIMEOUT"]],
  [409, [400, ErrorCategory.ERROR_CATEGORY_INPUT_ERROR, "CONFLICT"]],
  [422, [400, ErrorCategory.ERROR_CATEGORY_INPUT_ERROR, "UNPROCESSABLE"]],
  [429, [429, ErrorCategory.ERROR_CATEGORY_RATE_LIMIT, "RATE_LIMITED"]],
]);

/** (status the tool answers with, category, code) for an upstream status (0 = none). */
export function toolStatus(upstream: number): Row {
  const row = TABLE.get(upstream);
  if (row !== undefined) return row;
  if (upstream === 0) return [502, ErrorCategory.ERROR_CATEGORY_SERVICE_ERROR, "UPSTREAM_UNAVAILABLE"];
  if (upstream >= 400 && upstream < 500) return [400, ErrorCategory.ERROR_CATEGORY_INPUT_ERROR, "UPSTREAM_CLIENT_ERROR"];
  if (upstream >= 500) return [502, ErrorCategory.ERROR_CATEGORY_SERVICE_ERROR, "UPSTREAM_SERVER_ERROR"];
  // 1xx-3xx reported as a failure: the answer will not change on resend.
  return [502, ErrorCategory.ERROR_CATEGORY_SERVICE_ERROR, "UNEXPECTED_STATUS"];
}

export interface Failure {
  readonly errorMessage: string;
  readonly httpStatus: number;
  readonly transportFailure: boolean;
  readonly headers: HeaderMap;
}

// With the "u" flag a surrogate pair is one character, so only lone halves match.
const LONE_SURROGATE = /[\ud800-\udfff]/gu;

/**
 * `text` with each lone surrogate (which a JSON body's escapes can carry)
 * replaced by U+FFFD, as the daemon's text gate replaces it.
 */
export function wellFormed(text: string): string {
  return text.replace(LONE_SURROGATE, "\ufffd");
}

/** Classify one failure under the default profile; `nowMs` is read only for an HTTP-date Retry-After. */
export function classifyFailure(failure: Failure, nowMs: number): ClassifyResponse {
  checkStatus(failure.httpStatus);
  const upstream = failure.transportFailure ? 0 : failure.httpStatus || statusFromText(failure.errorMessage);
  const [httpStatus, category, tableCode] = toolStatus(upstream);
  const wait = retryAfterMs(failure.headers, nowMs);
  return {
    httpStatus,
    category,
    retryable: upstream === 0 || isTransientStatus(upstream),
    code: failure.transportFailure ? "TRANSPORT_FAILURE" : tableCode,
    upstreamStatus: upstream,
    redactedMessage: redact(wellFormed(failure.errorMessage)),
    retryAfter: wait === undefined ? undefined : durationFromMs(wait),
  };
}
