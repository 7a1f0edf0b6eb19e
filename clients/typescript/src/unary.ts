// One unary gRPC call as a promise: a deadline, and a signal that cancels
// the call and rejects with its reason.
import { status, type CallOptions as GrpcCallOptions, type ClientUnaryCall, type Metadata, type ServiceError } from "@grpc/grpc-js";

type Callback<Res> = (error: ServiceError | null, response: Res) => void;
/** Starts the call on a generated stub, e.g. `(md, co, cb) => stub.admit(request, md, co, cb)`. */
export type Start<Res> = (metadata: Metadata, options: Partial<GrpcCallOptions>, callback: Callback<Res>) => ClientUnaryCall;

/**
 * `onEnd` hears how the call ended (its status; OK for an answer), unless
 * the signal ended it first: the caller's own cancellation says nothing of
 * the daemon.
 */
export function unary<Res>(
  start: Start<Res>,
  metadata: Metadata,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  onEnd?: (code: status) => void,
): Promise<Res> {
  return new Promise<Res>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    let settled = false;
    let call: ClientUnaryCall | undefined;
    const onAbort = (): void => {
      if (settled) return;
      settled = true;
      call?.cancel();
      reject(signal?.reason);
    };
    call = start(metadata, { deadline: Date.now() + timeoutMs }, (error, response) => {
      signal?.removeEventListener("abort", onAbort);
      if (settled) return;
      settled = true;
      onEnd?.(error ? error.code : status.OK);
      if (error) reject(error);
      else resolve(response);
    });
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
