// squawkFetch: an SDK behind Squawk at its HTTP layer, every attempt
// admitted, reported and, on a failure, decided by the policy.
//
// The official LLM SDKs (the `openai` npm package, and any that takes a
// `fetch` option) send every call through that function; it is the one seam
// below their own retry loop. Each request is a step of runStep for the
// named upstream, so a request is admitted by the pod's pace and breaker, a
// response of 400 or more is a failed attempt that DecideRetry answers (the
// same request is resent after the decided wait on RETRY), and each success
// is reported with its rate-limit headers and the tokens its JSON body says
// it used. The Python client's httpx transports do the same
// (squawk_client/_http.py): what one does, the other does.
//
// What the SDK gets back is what it would have got without Squawk: the last
// response when the policy ends the step on an HTTP failure (its own error
// type follows), the fetch's own error when no response came, and, when the
// pod refuses a dispatch before any call (a pace, a breaker, a cool-down), a
// 503 of Squawk's own that says why (`x-squawk-reason`) and asks the SDK not
// to retry it (`x-should-retry: false`). There is no correction hook: a 4xx
// is never rewritten here.
//
// The SDK's own retries must be off (`maxRetries: 0`): left on, they resend
// what Squawk already decided to end, invisibly to the pace. The SDKs number
// their resends in `x-stainless-retry-count`; a request whose count is above
// zero is counted (`sdkRetries`) and warned of once per wrapper.
import { SquawkInputError } from "./errors";
import type { Decision } from "./options";
import {
  criticality,
  CRITICALITY_HEADER,
  criticalityHeaderValue,
  runStep,
  StepFailedError,
  validate,
  type DecisionSource,
  type RunStepOptions,
} from "./runner";
import { StepError } from "./steperror";

/** The Fetch API's `fetch`, as the SDKs type their `fetch` option. */
export type FetchFunction = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** What squawkFetch takes: the upstream, and the rest of each step (see RunStepOptions). */
export interface SquawkFetchOptions
  extends Pick<RunStepOptions<unknown, unknown>, "profile" | "capability" | "maxAttempts" | "cost" | "deadlineMs"> {
  /** The upstream the SDK calls, as the pod tracks it (e.g. "openai"): required. */
  readonly upstream: string;
  /** What sends each request; default: the global `fetch`. */
  readonly fetch?: FetchFunction;
}

/** A `fetch` for an SDK's `fetch` option, each request a step of the runner. */
export interface SquawkFetch extends FetchFunction {
  /** Requests the SDK resent on its own (`x-stainless-retry-count` above 0): 0 with `maxRetries: 0`. */
  readonly sdkRetries: number;
}

/** The most of a failed response's body the policy is shown (an envelope, an error message); the SDK still gets it whole. */
const MAX_ERROR_BODY = 64 * 1024;
/** A usage count past this is not a real one (RunStepOptions.cost's bound). */
const MAX_TOKENS = 1e9;

/** An HTTP failure, holding the response the SDK gets if it is the last. */
class Answered extends StepError {
  override name = "Answered";
  readonly response: Response;

  constructor(response: Response, body: Uint8Array | undefined) {
    super(`HTTP ${response.status}`, { httpStatus: response.status, body, headers: response.headers });
    this.response = response;
  }
}

/** What a successful attempt hands the runner: the response, and the tokens its body says it used. */
interface Sent {
  readonly response: Response;
  readonly tokens: number;
}

function mediaType(response: Response): string {
  return (response.headers.get("content-type") ?? "").split(";", 1)[0].trim().toLowerCase();
}

/**
 * The tokens a JSON body's `usage` states: OpenAI's `total_tokens`, else
 * Anthropic's input plus output; 0 (unknown) for anything else.
 */
export function usedTokens(text: string): number {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return 0;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return 0;
  const usage: unknown = (parsed as Record<string, unknown>)["usage"];
  if (typeof usage !== "object" || usage === null || Array.isArray(usage)) return 0;
  const count = usage as Record<string, unknown>;
  const total = count["total_tokens"] ?? sum(count["input_tokens"] ?? 0, count["output_tokens"] ?? 0);
  return typeof total === "number" && Number.isFinite(total) && total >= 0 && total <= MAX_TOKENS ? total : 0;
}

function sum(a: unknown, b: unknown): number {
  return typeof a === "number" && typeof b === "number" ? a + b : NaN;
}

/** The first MAX_ERROR_BODY bytes of a failed response, read from a clone (the SDK reads the original); none of a stream. */
async function headOf(response: Response): Promise<Uint8Array | undefined> {
  // An event stream may never end: its body is the SDK's alone.
  if (response.body === null || mediaType(response) === "text/event-stream") return undefined;
  const reader = response.clone().body!.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < MAX_ERROR_BODY) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } catch {
    // A body cut short: the policy reads what came; the status is the failure.
  } finally {
    reader.cancel().catch(() => undefined);
  }
  const head = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    head.set(chunk, at);
    at += chunk.byteLength;
  }
  return head.subarray(0, MAX_ERROR_BODY);
}

/** A body that a second fetch cannot send again: a stream, or an async iterable. */
function oneShot(body: unknown): boolean {
  if (typeof body !== "object" || body === null) return false;
  return (typeof ReadableStream !== "undefined" && body instanceof ReadableStream) || Symbol.asyncIterator in body;
}

/**
 * A copy of a byte body, so that every attempt sends the bytes of the
 * first even if the caller reuses its buffer; any other body is sent as
 * given (a string, a Blob, FormData and URLSearchParams are re-sendable).
 */
function buffered(body: RequestInit["body"]): RequestInit["body"] {
  if (body instanceof ArrayBuffer) return body.slice(0);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength).slice();
  return body;
}

/** The request's headers as a fetch would send them: `init`'s, else the Request's. */
function requestHeaders(input: string | URL | Request, init: RequestInit | undefined): Headers {
  if (init?.headers !== undefined) return new Headers(init.headers);
  return input instanceof Request ? input.headers : new Headers();
}

/**
 * What each attempt sends as `init`: a copy of the caller's (its byte body
 * buffered), with `squawk-criticality` added when a level is in force and
 * the request does not carry the header already. The caller's Headers and
 * Request are never changed: the header goes on a new Headers.
 */
function outgoing(input: string | URL | Request, init: RequestInit | undefined): RequestInit | undefined {
  const sent: RequestInit | undefined = init === undefined ? undefined : { ...init, body: buffered(init.body) };
  const level = criticalityHeaderValue(criticality());
  if (level === undefined) return sent;
  const own = requestHeaders(input, init);
  if (own.has(CRITICALITY_HEADER)) return sent; // the request's own value goes out as it is
  const headers = new Headers(own);
  headers.set(CRITICALITY_HEADER, level);
  return { ...sent, headers };
}

/** Squawk's own 503 for a dispatch the pod refused before any call: why, and not to be retried. */
function refusal(decision: Decision): Response {
  const reason = String(decision.reason);
  const body = { type: "error", error: { type: "squawk_refused", code: reason, message: decision.explanation } };
  return new Response(JSON.stringify(body), {
    status: 503,
    headers: { "content-type": "application/json", "x-should-retry": "false", "x-squawk-reason": reason },
  });
}

/**
 * A `fetch` that runs each request as a step of `runStep` for
 * `options.upstream`, for an SDK's `fetch` option, with the SDK's own
 * retries off:
 *
 *     new OpenAI({ maxRetries: 0, fetch: squawkFetch(client, { upstream: "openai" }) })
 *
 * A response of 400 or more is a failed attempt (its status, the first
 * 64 KiB of its body and its headers go to DecideRetry); on RETRY the same
 * request is sent again (a ReadableStream body is sent once: its first
 * failure ends the step). A success is reported with its rate-limit headers
 * and, for an application/json body, its `usage` tokens as the cost (read
 * from a clone; an event stream is never read). When the policy ends the
 * step the SDK gets the last response, or the fetch's error when none came,
 * or Squawk's own 503 (`x-squawk-reason`, `x-should-retry: false`) when the
 * pod refused the dispatch before any call. While a criticality is in force
 * (`criticality()`: a step's own, or inherited) each request carries it as
 * `squawk-criticality` (the level's name, e.g. SHEDDABLE), unless it has the
 * header already. A request the SDK resends on its own is counted in
 * `sdkRetries` and warned of once. Options out of range are a
 * SquawkInputError here, before any request.
 */
export function squawkFetch(client: DecisionSource, options: SquawkFetchOptions): SquawkFetch {
  const { upstream, profile, capability, maxAttempts, cost, deadlineMs } = options;
  if (typeof upstream !== "string" || upstream === "") {
    throw new SquawkInputError("upstream", 'upstream: name the upstream this fetch calls, e.g. "openai"');
  }
  const stepOptions = { upstream, profile, capability, maxAttempts, cost, deadlineMs };
  validate(stepOptions);
  // Looked up at each call, so that a fetch patched in later (a test's, a tracer's) is the one used.
  const send: FetchFunction = options.fetch ?? ((input, init) => fetch(input, init));
  let sdkRetries = 0;

  const squawked = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const count = requestHeaders(input, init).get("x-stainless-retry-count")?.trim() ?? "";
    if (count !== "" && count !== "0") {
      sdkRetries += 1;
      if (sdkRetries === 1) {
        process.emitWarning(
          `the SDK calling upstream ${JSON.stringify(upstream)} retries on its own: set maxRetries: 0, ` +
            "so that only Squawk's policy resends (docs/sdks.md)",
          "SquawkSdkRetryWarning",
        );
      }
    }
    const body = init?.body;
    const sent = outgoing(input, init);
    // A failed response the policy resent past: its body is nobody's now.
    let dropped: Response | undefined;

    const attempt = async (): Promise<Sent> => {
      dropped?.body?.cancel().catch(() => undefined);
      dropped = undefined;
      // A Request is cloned for each send: fetch consumes the body of what it sends.
      const response = await send(input instanceof Request ? input.clone() : input, sent);
      if (response.status >= 400) {
        dropped = response;
        throw new Answered(response, await headOf(response));
      }
      const tokens = mediaType(response) === "application/json" ? usedTokens(await response.clone().text()) : 0;
      return { response, tokens };
    };

    try {
      const done = await runStep(client, undefined, attempt, {
        ...stepOptions,
        signal: init?.signal ?? undefined,
        costOf: (result: Sent) => result.tokens,
        headersOf: (result: Sent) => result.response.headers,
        // A stream cannot be sent twice: its first failure is the last.
        onError: oneShot(body) ? () => "fail" : undefined,
      });
      return done.response;
    } catch (error) {
      if (!(error instanceof StepFailedError)) {
        dropped?.body?.cancel().catch(() => undefined); // aborted: no response goes back
        throw error;
      }
      const cause: unknown = error.cause;
      if (cause instanceof Answered) return cause.response;
      if (cause !== undefined) throw cause; // no response came: the fetch's own error
      return refusal(error.decision);
    }
  };

  Object.defineProperty(squawked, "sdkRetries", { get: () => sdkRetries, enumerable: true });
  return squawked as SquawkFetch;
}
