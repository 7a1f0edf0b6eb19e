// StepError: how a step reports a failed call to a component.
/** Headers as a plain object, or anything with forEach (the Fetch API's Headers). */
export type HeaderSource =
  | Readonly<Record<string, string>>
  | { forEach(callback: (value: string, key: string) => void): void };

export interface StepErrorInit {
  /** The component's HTTP status; 0 = no response (transport failure) or unknown. */
  readonly httpStatus?: number;
  /** True when no HTTP response arrived (connect, reset, DNS, timeout). */
  readonly transportFailure?: boolean;
  /** The component's raw response body; read for its error envelope. */
  readonly body?: Uint8Array | string;
  readonly headers?: HeaderSource;
  readonly cause?: unknown;
}

/** The minimum of a Fetch API Response that StepError.fromResponse reads. */
export interface ResponseLike {
  readonly status: number;
  readonly statusText?: string;
  readonly headers: { forEach(callback: (value: string, key: string) => void): void };
  arrayBuffer(): Promise<ArrayBuffer>;
}

function headerRecord(source: HeaderSource | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (source === undefined) return out;
  if (typeof source.forEach === "function") {
    (source as { forEach(callback: (value: string, key: string) => void): void }).forEach((value, key) => {
      out[key] = value;
    });
    return out;
  }
  for (const [key, value] of Object.entries(source as Readonly<Record<string, string>>)) out[key] = value;
  return out;
}

/**
 * A failed call to a component, as a step reports it. Any other thrown
 * error counts as a transport failure.
 */
export class StepError extends Error {
  override name = "StepError";
  readonly httpStatus: number;
  readonly transportFailure: boolean;
  readonly body: Uint8Array | string | undefined;
  readonly headers: Readonly<Record<string, string>>;

  constructor(message: string, init: StepErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.httpStatus = init.httpStatus ?? 0;
    this.transportFailure = init.transportFailure ?? false;
    this.body = init.body;
    this.headers = Object.freeze(headerRecord(init.headers));
  }

  /** A StepError from a non-2xx Fetch API response (reads its body). */
  static async fromResponse(response: ResponseLike, message?: string): Promise<StepError> {
    const body = new Uint8Array(await response.arrayBuffer());
    const text = message ?? `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`;
    return new StepError(text, { httpStatus: response.status, body, headers: response.headers });
  }
}
