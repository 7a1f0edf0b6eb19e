// SquawkClient: typed squawk.v1 calls with a per-call deadline, W3C trace
// context on every call, and the local fallback when the daemon cannot answer.
import {
  credentials as grpcCredentials,
  Metadata,
  status,
  type CallOptions as GrpcCallOptions,
  type ChannelCredentials,
  type ChannelOptions,
  type ClientUnaryCall,
  type ServiceError,
} from "@grpc/grpc-js";
import { context as otelContext, propagation, type Context, type TextMapPropagator, type TextMapSetter } from "@opentelemetry/api";
import { SquawkError, SquawkInputError } from "./errors";
import { fallbackProfileFromEnv } from "./env";
import { fallbackDecide, type FallbackProfile } from "./fallback";
import {
  ClassifyRequest,
  DecideRetryRequest,
  PolicyServiceClient,
  type ClassifyResponse,
  type DecideRetryResponse,
  type DeepPartial,
} from "./gen/squawk/v1/policy";

/** A decision, from the daemon (`fallback: false`) or the local fallback (`fallback: true`). */
export type Decision = DecideRetryResponse & { readonly fallback: boolean };

/** A ClassifyRequest; every field may be left out (proto3 defaults). */
export type ClassifyInput = DeepPartial<ClassifyRequest>;
/** A DecideRetryRequest; every field but `attempt` may be left out. A string body is sent as UTF-8. */
export type DecideRetryInput = Omit<DeepPartial<DecideRetryRequest>, "responseBody"> & {
  responseBody?: Uint8Array | string | undefined;
};

export type SquawkMethod = "classify" | "decideRetry";

export interface FallbackEvent {
  readonly method: SquawkMethod;
  /** The gRPC error that sent the call to the fallback (only decideRetry falls back). */
  readonly cause: ServiceError;
}

export interface SquawkClientOptions {
  /** Deadline for each call, in ms (default 50). A slower daemon is answered for by the fallback. */
  readonly callTimeoutMs?: number;
  /** Answer from the local fallback when the daemon is unreachable or slow (default true). */
  readonly fallback?: boolean;
  /** Channel credentials (default insecure: the daemon listens on loopback). */
  readonly credentials?: ChannelCredentials;
  /** grpc-js channel options, merged over the defaults (short reconnect backoff). */
  readonly channelOptions?: ChannelOptions;
  /** Propagator for trace context (default: the global @opentelemetry/api propagator). */
  readonly propagator?: TextMapPropagator;
  /**
   * Overrides of the fallback's default-profile numbers (default: the built-in
   * profile with the environment's SQUAWK_STEP_RETRY_* overrides, as the daemon reads them).
   */
  readonly fallbackProfile?: Partial<FallbackProfile>;
  /** Clock in Unix ms, read by the fallback for an HTTP-date Retry-After (default Date.now). */
  readonly now?: () => number;
  /** Called each time the fallback answers a decision. */
  readonly onFallback?: (event: FallbackEvent) => void;
}

export interface CallOptions {
  /** Aborting cancels the call; the promise rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
  /** This call's deadline in ms (default: the client's callTimeoutMs). */
  readonly timeoutMs?: number;
  /** Trace context to propagate (default: the active context). */
  readonly context?: Context;
}

/**
 * Channel defaults: reconnect quickly after the daemon restarts, so the
 * client stops using the fallback within about a second.
 */
export const DEFAULT_CHANNEL_OPTIONS: ChannelOptions = Object.freeze({
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 1000,
});

/** Codes that mean "the daemon did not answer": the fallback takes over. */
const FALLBACK_CODES: ReadonlySet<status> = new Set([status.UNAVAILABLE, status.DEADLINE_EXCEEDED]);

const metadataSetter: TextMapSetter<Metadata> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

type Callback<Res> = (error: ServiceError | null, response: Res) => void;
type Start<Res> = (metadata: Metadata, options: Partial<GrpcCallOptions>, callback: Callback<Res>) => ClientUnaryCall;

function isServiceError(error: unknown): error is ServiceError {
  if (!(error instanceof Error)) return false;
  const e = error as Partial<ServiceError>;
  // A DOMException (an abort reason) has a numeric code too, but no details or metadata.
  return typeof e.code === "number" && typeof e.details === "string" && e.metadata instanceof Metadata;
}

/** The daemon names the field first: "attempt: must be >= 1 ...". */
function fieldOf(details: string): string {
  const i = details.indexOf(":");
  return i > 0 ? details.slice(0, i).trim() : "";
}

export class SquawkClient {
  readonly target: string;
  private readonly stub: PolicyServiceClient;
  private readonly callTimeoutMs: number;
  private readonly fallbackEnabled: boolean;
  private readonly propagator: TextMapPropagator | undefined;
  private readonly profile: FallbackProfile;
  private readonly now: () => number;
  private readonly onFallback: ((event: FallbackEvent) => void) | undefined;
  private fallbacks = 0;
  private closed = false;

  constructor(target: string, options: SquawkClientOptions = {}) {
    this.target = target;
    this.callTimeoutMs = options.callTimeoutMs ?? 50;
    if (!(this.callTimeoutMs > 0)) throw new RangeError(`callTimeoutMs must be > 0, got ${this.callTimeoutMs}`);
    this.fallbackEnabled = options.fallback ?? true;
    this.propagator = options.propagator;
    this.profile = { ...fallbackProfileFromEnv(), ...options.fallbackProfile };
    this.now = options.now ?? Date.now;
    this.onFallback = options.onFallback;
    this.stub = new PolicyServiceClient(target, options.credentials ?? grpcCredentials.createInsecure(), {
      ...DEFAULT_CHANNEL_OPTIONS,
      ...options.channelOptions,
    });
  }

  /** How many decisions came from the local fallback. */
  get fallbackCount(): number {
    return this.fallbacks;
  }

  /**
   * Classify an upstream failure. Only the daemon classifies: there is no
   * fallback here (an unreachable daemon is a SquawkError), as in the Python client.
   */
  async classify(input: ClassifyInput, options: CallOptions = {}): Promise<ClassifyResponse> {
    const request = ClassifyRequest.fromPartial(input);
    try {
      return await this.invoke<ClassifyResponse>((md, co, cb) => this.stub.classify(request, md, co, cb), options);
    } catch (error) {
      throw this.translate("classify", error, options);
    }
  }

  /** Decide what to do after a failed attempt. */
  async decideRetry(input: DecideRetryInput, options: CallOptions = {}): Promise<Decision> {
    const { responseBody, ...rest } = input;
    const request = DecideRetryRequest.fromPartial({
      ...rest,
      responseBody: typeof responseBody === "string" ? Buffer.from(responseBody, "utf8") : responseBody,
    });
    try {
      const response = await this.invoke<DecideRetryResponse>(
        (md, co, cb) => this.stub.decideRetry(request, md, co, cb),
        options,
      );
      return { ...response, fallback: false };
    } catch (error) {
      if (!this.fallbackEnabled || !isServiceError(error) || !FALLBACK_CODES.has(error.code)) {
        throw this.translate("decideRetry", error, options);
      }
      // Invalid input throws here, as the daemon would refuse it.
      const decision: Decision = { ...fallbackDecide(request, this.now(), this.profile), fallback: true };
      this.fallbacks += 1;
      this.onFallback?.({ method: "decideRetry", cause: error });
      return decision;
    }
  }

  /** Close the channel; later calls reject. */
  close(): void {
    this.closed = true;
    this.stub.close();
  }

  private metadata(ctx: Context | undefined): Metadata {
    const metadata = new Metadata();
    const active = ctx ?? otelContext.active();
    if (this.propagator !== undefined) this.propagator.inject(active, metadata, metadataSetter);
    else propagation.inject(active, metadata, metadataSetter);
    return metadata;
  }

  /** A gRPC error as the client's own error; an abort reason and anything else unchanged. */
  private translate(method: SquawkMethod, error: unknown, options: CallOptions): unknown {
    if (options.signal?.aborted && error === options.signal.reason) return error;
    if (!isServiceError(error)) return error;
    if (error.code === status.INVALID_ARGUMENT) {
      return new SquawkInputError(fieldOf(error.details), error.details, { cause: error });
    }
    return new SquawkError(error.code, `${method}: ${error.details || error.message}`, { cause: error });
  }

  private invoke<Res>(start: Start<Res>, options: CallOptions): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      const { signal } = options;
      if (this.closed) {
        reject(new Error(`SquawkClient for ${this.target} is closed`));
        return;
      }
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
      const deadline = Date.now() + (options.timeoutMs ?? this.callTimeoutMs);
      call = start(this.metadata(options.context), { deadline }, (error, response) => {
        signal?.removeEventListener("abort", onAbort);
        if (settled) return;
        settled = true;
        if (error) reject(error);
        else resolve(response);
      });
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}
