// Inputs as request messages, refused with a SquawkInputError naming the
// field when they cannot be encoded at all. The policy's own bounds (attempt
// >= 1, ...) are the daemon's to check, and the fallback's.
import { SquawkInputError } from "./errors";
import { DecideRetryRequest, type DecideRetryBatchRequest } from "./gen/squawk/v1/policy";
import type { DecideRetryBatchInput, DecideRetryInput } from "./options";

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
 * (Classify, DecideRetry, AnalyzeError); the encoder would throw on 1.5 or
 * 2^31 with a message that names no field.
 */
function checkInt32s(message: object, prefix: string): void {
  for (const [key, value] of Object.entries(message)) {
    if (typeof value !== "number") continue;
    if (!Number.isInteger(value) || value < INT32_MIN || value > INT32_MAX) {
      refuse(prefix + snake(key), `must be a 32-bit integer, got ${value}`);
    }
  }
}

/** `fromPartial(input)` for a request whose numbers are all int32, or a SquawkInputError. */
export function checked<T extends object>(method: string, fromPartial: (input: never) => T, input: unknown, prefix = ""): T {
  if (!isObject(input)) {
    const what = input === null ? "null" : typeof input;
    refuse(prefix === "" ? "request" : prefix.slice(0, -1), `${method} needs a request object, got ${what}`);
  }
  const message = fromPartial(input as never);
  checkInt32s(message, prefix);
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
  const { deadline } = request;
  if (deadline !== undefined) {
    if (!Number.isSafeInteger(deadline.seconds)) refuse(`${prefix}deadline.seconds`, `must be an integer, got ${deadline.seconds}`);
    checkInt32s({ nanos: deadline.nanos }, `${prefix}deadline.`);
  }
  return request;
}

export function batchRequest(input: DecideRetryBatchInput): DecideRetryBatchRequest {
  const items: unknown = isObject(input) ? input.requests : undefined;
  if (!Array.isArray(items)) refuse("requests", "decideRetryBatch needs {requests: [...]}, an array of requests");
  return { requests: (items as DecideRetryInput[]).map((item, i) => decideRequest(item, `requests[${i}].`)) };
}
