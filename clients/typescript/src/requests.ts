// Inputs as request messages, refused with a SquawkInputError naming the
// field when they cannot be encoded at all. The policy's own bounds (attempt
// >= 1, ...) are the daemon's to check, and the fallback's.
import { SquawkInputError } from "./errors";
import type { Duration } from "./gen/google/protobuf/duration";
import { DecideRetryRequest, Outcome, type DecideRetryBatchRequest, type ReportOutcomeRequest } from "./gen/squawk/v1/policy";
import type { DecideRetryBatchInput, DecideRetryInput, ReportOutcomeInput } from "./options";

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;

/** attemptCount -> attempt_count: fields are named as the proto names them. */
function snake(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function refuse(field: string, why: string): never {
  throw new SquawkInputError(field, `${field}: ${why}`);
}

function isObject(value: unknown): value is object {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Every top-level number of a request message is an int32 on the wire
 * (Classify, DecideRetry, AnalyzeError), but for the int64 fields named in
 * `int64s` (GetEventsRequest.after), numbers here (forceLong=number) and so
 * safe integers; the encoder would throw on 1.5 or 2^31 (2^53 for an
 * int64) with a message that names no field.
 */
function checkInt32s(message: object, prefix: string, int64s: readonly string[] = []): void {
  for (const [key, value] of Object.entries(message)) {
    if (typeof value !== "number") continue;
    if (int64s.includes(key)) {
      if (!Number.isSafeInteger(value)) refuse(prefix + snake(key), `must be an integer, got ${value}`);
    } else if (!Number.isInteger(value) || value < INT32_MIN || value > INT32_MAX) {
      refuse(prefix + snake(key), `must be a 32-bit integer, got ${value}`);
    }
  }
}

/**
 * `fromPartial(input)` for a request whose numbers are all int32 but for
 * the int64 fields named in `int64s` (as the message names them, camelCase),
 * or a SquawkInputError.
 */
export function checked<T extends object>(
  method: string,
  fromPartial: (input: never) => T,
  input: unknown,
  prefix = "",
  int64s: readonly string[] = [],
): T {
  if (!isObject(input)) {
    const what = input === null ? "null" : typeof input;
    refuse(prefix === "" ? "request" : prefix.slice(0, -1), `${method} needs a request object, got ${what}`);
  }
  const message = fromPartial(input as never);
  checkInt32s(message, prefix, int64s);
  return message;
}

/** A DecideRetryRequest from an input whose body may be a string (sent as UTF-8). */
export function decideRequest(input: DecideRetryInput, prefix = ""): DecideRetryRequest {
  const body: unknown = isObject(input) ? input.responseBody : undefined;
  if (body !== undefined && typeof body !== "string" && !(body instanceof Uint8Array)) {
    refuse(`${prefix}response_body`, `must be a string or a Uint8Array, got ${typeof body}`);
  }
  const request = checked(
    "decideRetry",
    DecideRetryRequest.fromPartial,
    isObject(input) ? { ...input, responseBody: typeof body === "string" ? new TextEncoder().encode(body) : body } : input,
    prefix,
  );
  checkDuration(request.deadline, `${prefix}deadline.`);
  return request;
}

/** A Duration's seconds are an int64 on the wire; the encoder would throw on 1.5 naming no field. */
function checkDuration(duration: Duration | undefined, prefix: string): void {
  if (duration === undefined) return;
  if (!Number.isSafeInteger(duration.seconds)) refuse(`${prefix}seconds`, `must be an integer, got ${duration.seconds}`);
  checkInt32s({ nanos: duration.nanos }, prefix);
}

export function batchRequest(input: DecideRetryBatchInput): DecideRetryBatchRequest {
  const items: unknown = isObject(input) ? input.requests : undefined;
  if (!Array.isArray(items)) refuse("requests", "decideRetryBatch needs {requests: [...]}, an array of requests");
  return { requests: (items as DecideRetryInput[]).map((item, i) => decideRequest(item, `requests[${i}].`)) };
}

export function reportRequest(input: ReportOutcomeInput): ReportOutcomeRequest {
  const items: unknown = isObject(input) ? input.outcomes : undefined;
  if (!Array.isArray(items)) refuse("outcomes", "reportOutcome needs {outcomes: [...]}, an array of outcomes");
  return {
    outcomes: (items as unknown[]).map((item, i) => {
      const outcome = checked("reportOutcome", Outcome.fromPartial, item, `outcomes[${i}].`);
      checkDuration(outcome.latency, `outcomes[${i}].latency.`);
      return outcome;
    }),
  };
}
