// Errors the client throws.
import { status } from "@grpc/grpc-js";

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
 * offending request field (snake_case, as in the proto), e.g. "attempt".
 */
export class SquawkInputError extends SquawkError {
  override name = "SquawkInputError";
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(status.INVALID_ARGUMENT, message, options);
    this.field = field;
  }
}
