// The fallback's classification (docs/fallback.md): the status tables alone,
// generated into fallback_table.ts; no error text is read or copied.
import { durationFromMs } from "./duration";
import type { ClassifyResponse } from "./gen/squawk/v1/policy";
import { waitHint, type HeaderMap } from "./headers";
import { SquawkInputError } from "./errors";
import {
  NO_STATUS_ROW,
  OTHER_4XX_ROW,
  OTHER_5XX_ROW,
  OTHER_STATUS_ROW,
  STATUS_TABLE,
  TERMINAL_STATUSES,
  TRANSIENT_FROM,
  TRANSIENT_STATUSES,
  TRANSIENT_TO,
  TRANSPORT_CODE,
  type StatusRow,
} from "./fallback_table";

/** The resend-unchanged set. */
export function isTransientStatus(status: number): boolean {
  return TRANSIENT_STATUSES.includes(status) || (status >= TRANSIENT_FROM && status <= TRANSIENT_TO);
}

/** The never-retry set. */
export function isTerminalStatus(status: number): boolean {
  return TERMINAL_STATUSES.includes(status);
}

export function checkStatus(status: number, field = "http_status"): void {
  if (status !== 0 && !(status >= 100 && status <= 599)) {
    throw new SquawkInputError(field, `${field}: ${status} is not an HTTP status (0 or 100..599)`);
  }
}

/** (status the tool answers with, category, code) for an upstream status (0 = none). */
export function toolStatus(upstream: number): StatusRow {
  const row = STATUS_TABLE.get(upstream);
  if (row !== undefined) return row;
  if (upstream === 0) return NO_STATUS_ROW;
  if (upstream >= 400 && upstream < 500) return OTHER_4XX_ROW;
  if (upstream >= 500) return OTHER_5XX_ROW;
  return OTHER_STATUS_ROW;
}

/** Classify one failure by the status tables; `nowMs` is read only for an HTTP-date Retry-After. */
export function classifyFailure(httpStatus: number, transportFailure: boolean, headers: HeaderMap, nowMs: number): ClassifyResponse {
  checkStatus(httpStatus);
  const upstream = transportFailure ? 0 : httpStatus;
  const [status, category, code] = toolStatus(upstream);
  const wait = waitHint(headers, nowMs);
  return {
    httpStatus: status,
    category,
    retryable: upstream === 0 || isTransientStatus(upstream),
    code: transportFailure ? TRANSPORT_CODE : code,
    upstreamStatus: upstream,
    redactedMessage: "",
    retryAfter: wait === undefined ? undefined : durationFromMs(wait.ms),
  };
}
