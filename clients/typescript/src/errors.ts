// Errors the client throws:
//
//   Error
//   ├── SquawkError         a gRPC status the client does not answer for (.code)
//   │   └── SquawkInputError  INVALID_ARGUMENT: the request breaks the contract (.field)
//   └── StepFailedError     (runner.ts) the policy, or the pod's refusals, ended a step
//
// An aborted signal rejects with `signal.reason`, never with these.
import { Metadata, status, type ServiceError } from "@grpc/grpc-js";
import { BadRequest } from "./gen/google/rpc/error_details";
import { Status } from "./gen/google/rpc/status";

/** A call the daemon (or the fallback) refused or could not answer. */
export class SquawkError extends Error {
  override name = "SquawkError";
  /** The gRPC status code. */
  readonly code: status;
  constructor(code: status, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/**
 * INVALID_ARGUMENT: the request breaks the contract. `field` names the
 * offending request field as the proto does (snake_case), e.g. "attempt",
 * "deadline.seconds", "requests[3].attempt"; "" only when a daemon refusal
 * named none.
 */
export class SquawkInputError extends SquawkError {
  override name = "SquawkInputError";
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(status.INVALID_ARGUMENT, message, options);
    this.field = field;
  }
}

/** The standard trailer of gRPC's rich error model: a serialized google.rpc.Status. */
const STATUS_DETAILS = "grpc-status-details-bin";
const BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest";

export function isServiceError(error: unknown): error is ServiceError {
  if (!(error instanceof Error)) return false;
  const e = error as Partial<ServiceError>;
  // A DOMException (an abort reason) has a numeric code too, but no details or metadata.
  return typeof e.code === "number" && typeof e.details === "string" && e.metadata instanceof Metadata;
}

/**
 * "field: description" -> "field". A field path has no spaces, so a message
 * such as "bad input: ..." is not read as naming a field.
 */
export function fieldFromMessage(message: string): string {
  const i = message.indexOf(": ");
  if (i <= 0) return "";
  const field = message.slice(0, i);
  return /\s/.test(field) ? "" : field;
}

/** `decode(bytes)`, or undefined when the bytes are not that message. */
function decodeOrUndefined<T>(decode: (bytes: Uint8Array) => T, bytes: Uint8Array): T | undefined {
  try {
    return decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * The field of the first violation of a google.rpc.BadRequest in the status
 * trailer, if any. A trailer that does not decode is passed over: the
 * message prefix still names the field.
 */
function fieldFromDetails(metadata: Metadata): string | undefined {
  for (const raw of metadata.get(STATUS_DETAILS)) {
    if (typeof raw === "string") continue;
    const details = decodeOrUndefined((b) => Status.decode(b).details, raw) ?? [];
    for (const detail of details) {
      if (detail.typeUrl !== BAD_REQUEST_TYPE) continue;
      const violation = decodeOrUndefined((b) => BadRequest.decode(b).fieldViolations[0], detail.value);
      if (violation !== undefined) return violation.field;
    }
  }
  return undefined;
}

/** A daemon INVALID_ARGUMENT as a SquawkInputError: the field from the BadRequest detail, else from the message. */
export function inputErrorFrom(error: ServiceError): SquawkInputError {
  const field = fieldFromDetails(error.metadata) ?? fieldFromMessage(error.details);
  return new SquawkInputError(field, error.details, { cause: error });
}
