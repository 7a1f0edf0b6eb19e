// Client-side throttling of the calls to the daemon: the rules of
// docs/clients/README.md ("Client-side throttling"), pinned by
// tests/vectors/throttle.json, which the Python and Go clients run too.
//
// Why this rule: when the daemon itself is overloaded, a client should send
// it fewer calls, not more. It is the Google SRE book's adaptive throttling
// ("Handling Overload") with K = 2, which is Envoy's admission control
// filter at a 50 % success threshold: nothing is refused while the daemon
// answers at least half the calls, and past that it sees about twice what
// it answers, however many callers ask. The window is Hystrix's: ten
// one-second buckets, and no refusal below 20 requests in it (its request
// volume threshold), so a quiet client never refuses on a handful of calls.
// Refusals are random rather than a hold-off until the daemon's
// grpc-retry-pushback-ms: callers that all wait out the same pushback come
// back together, in waves. A sent call counts only once it ends: one in
// flight is no evidence either way, so a burst at start is sent whole.
//
// A pure state machine: the caller brings the clock (ms) and the random
// draw in [0, 1); no I/O, no timers. Memory is bounded: one window of ten
// buckets per RPC method of squawk.v1.PolicyService.
import { status } from "@grpc/grpc-js";

/** The RPC methods of squawk.v1.PolicyService, as the vectors name them. */
export type RpcMethod =
  | "Classify"
  | "DecideRetry"
  | "DecideRetryBatch"
  | "AnalyzeError"
  | "CheckDispatch"
  | "Admit"
  | "ReportOutcome"
  | "GetUpstreams"
  | "GetEvents"
  | "ExplainDecision";

/** The seconds of the rolling window, one bucket each (Hystrix's 10 s window). */
export const THROTTLE_WINDOW_SECONDS = 10;
/** Below this many requests in the window every call is sent (Hystrix's request volume threshold). */
export const THROTTLE_MIN_REQUESTS = 20;
/** The SRE book's K: the daemon sees about K times the calls it answers. */
export const THROTTLE_K = 2;

/** Whether to send a call, and the window's counts before it (for the refusal's message). */
export interface ThrottleVerdict {
  readonly send: boolean;
  /** Calls in the window before this one: those refused locally, and the sent ones that ended. */
  readonly requests: number;
  /** Sent calls in the window that ended other than RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED. */
  readonly accepts: number;
}

/** Whether a sent call that ended with `code` counts as answered: anything but a refusal for load or no answer in time. */
export function accepted(code: status): boolean {
  return code !== status.RESOURCE_EXHAUSTED && code !== status.DEADLINE_EXCEEDED;
}

/** One method's window: bucket i holds second `seconds[i]` (second mod 10 = i). */
class Window {
  private readonly seconds: number[] = new Array<number>(THROTTLE_WINDOW_SECONDS).fill(Number.NEGATIVE_INFINITY);
  private readonly requests: number[] = new Array<number>(THROTTLE_WINDOW_SECONDS).fill(0);
  private readonly accepts: number[] = new Array<number>(THROTTLE_WINDOW_SECONDS).fill(0);

  /** The counts of seconds s with now - 10 < s <= now. */
  counts(now: number): { requests: number; accepts: number } {
    let requests = 0;
    let accepts = 0;
    for (let i = 0; i < THROTTLE_WINDOW_SECONDS; i += 1) {
      const s = this.seconds[i];
      if (s > now - THROTTLE_WINDOW_SECONDS && s <= now) {
        requests += this.requests[i];
        accepts += this.accepts[i];
      }
    }
    return { requests, accepts };
  }

  addRequest(second: number): void {
    const i = this.bucket(second);
    this.requests[i] += 1;
  }

  addAccept(second: number): void {
    const i = this.bucket(second);
    this.accepts[i] += 1;
  }

  /** The bucket of `second`, emptied first when it held an older (or, the clock gone back, a later) second. */
  private bucket(second: number): number {
    const i = ((second % THROTTLE_WINDOW_SECONDS) + THROTTLE_WINDOW_SECONDS) % THROTTLE_WINDOW_SECONDS;
    if (this.seconds[i] !== second) {
      this.seconds[i] = second;
      this.requests[i] = 0;
      this.accepts[i] = 0;
    }
    return i;
  }
}

/** The whole second of a clock reading in ms. */
function secondOf(nowMs: number): number {
  return Math.floor(nowMs / 1000);
}

/**
 * @internal Per RPC method, the last ten whole seconds of calls: before a
 * call, `allow` says whether to send it, and counts it as a request when it
 * refuses it; when a sent call ends, `ended` counts it as a request, and as
 * an accept unless it ended RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED. A call
 * in flight is not counted, nor one the caller cancelled (`ended` is not
 * called for it): neither says anything of the daemon's load.
 */
export class Throttle {
  private readonly windows = new Map<RpcMethod, Window>();

  /**
   * Whether to send a call to `method` asked at `nowMs`, with `draw`
   * uniform in [0, 1): with fewer than 20 requests in the window, yes; else
   * when draw >= max(0, (requests - 2 x accepts) / (requests + 1)), the
   * counts taken before this call. A refused call counts as a request now;
   * a sent one when it ends.
   */
  allow(method: RpcMethod, nowMs: number, draw: number): ThrottleVerdict {
    const window = this.window(method);
    const second = secondOf(nowMs);
    const { requests, accepts } = window.counts(second);
    const send =
      requests < THROTTLE_MIN_REQUESTS ||
      draw >= Math.max(0, (requests - THROTTLE_K * accepts) / (requests + 1));
    if (!send) window.addRequest(second);
    return { send, requests, accepts };
  }

  /** A sent call to `method` ended at `nowMs` with gRPC status `code` (OK for an answer): a request, and maybe an accept. */
  ended(method: RpcMethod, nowMs: number, code: status): void {
    const window = this.window(method);
    const second = secondOf(nowMs);
    window.addRequest(second);
    if (accepted(code)) window.addAccept(second);
  }

  private window(method: RpcMethod): Window {
    let window = this.windows.get(method);
    if (window === undefined) {
      window = new Window();
      this.windows.set(method, window);
    }
    return window;
  }
}

/**
 * The message of a call refused locally, as the daemon's RESOURCE_EXHAUSTED
 * would carry it (the Python and Go clients word it the same).
 */
export function notSentMessage(method: RpcMethod, verdict: ThrottleVerdict): string {
  return (
    `squawk: not sent: the daemon answered ${verdict.accepts} of the last ${verdict.requests} ` +
    `${method} calls in time (${THROTTLE_WINDOW_SECONDS} s; client-side throttling)`
  );
}
