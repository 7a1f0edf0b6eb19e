// @ts-check
// An executor step in TypeScript's runtime, Node: search hotels, with Squawk
// deciding the retries. Plain JavaScript (an ES module), so Node runs it as
// it is; the JSDoc types are checked by tsc (`// @ts-check`).
//
//   cd examples/typescript && npm install     # links the built client
//   SQUAWK_ADDRESS=127.0.0.1:50051 UPSTREAM_URL=http://127.0.0.1:8080/search \
//     node executor.js PARIS
//
// The step is one HTTP call. runStep runs it and, after each failure, asks
// the daemon what to do (decideRetry): resend after a delay (a 503), correct
// the parameters (a 400), or stop. With `upstream` set it also asks the pod
// before each call (admit) and reports each success (reportOutcome), so
// every executor of the pod shares one breaker, retry budget and pace for
// the hotel API. When the daemon cannot be reached, the client decides
// alone, from the same rules (the local fallback); only corrections need it.
//
// Prints what the correction changed and the hotels found, or why the step
// failed (exit status 1). See examples/README.md.
import { SquawkClient, StepError, StepFailedError, runStep } from "@squawk/client";

/** @typedef {{ city_code: string, nights: number }} SearchParams */
/** @typedef {{ city_code: string, hotels: { name: string }[] }} SearchResult */

// The capability's input schema, as the executor already knows it (a tool
// schema). analyzeError suggests only values that satisfy it.
const SCHEMA = {
  type: "object",
  properties: {
    city_code: { type: "string", pattern: "^[A-Z]{3}$" },
    nights: { type: "integer", minimum: 1 },
  },
  required: ["city_code"],
};

/** The daemon found nothing it could safely change: resending would fail again. */
class NoSafeCorrection extends Error {
  name = "NoSafeCorrection";
}

const city = process.argv[2] ?? "PARIS";
const upstreamUrl = process.env.UPSTREAM_URL ?? "http://127.0.0.1:8080/search";
// The daemon is a sidecar on loopback: it answers in about a millisecond. A
// call it has not answered in callTimeoutMs (50 by default) is decided by the
// local fallback instead, so a wedged daemon never stalls a step; 1 s here,
// so that a first call on a busy machine still reaches it.
const client = new SquawkClient(process.env.SQUAWK_ADDRESS ?? "127.0.0.1:50051", { callTimeoutMs: 1000 });

/**
 * The step: one call to the upstream. A failed HTTP answer is thrown as a
 * StepError carrying its status, body and headers (Retry-After), which the
 * policy reads; any other error (fetch's TypeError when nothing answers)
 * counts as a transport failure.
 *
 * @param {SearchParams} params
 * @param {{ signal?: AbortSignal | undefined }} context
 * @returns {Promise<SearchResult>}
 */
async function searchHotels(params, { signal }) {
  const query = new URLSearchParams({ city_code: params.city_code, nights: String(params.nights) });
  const res = await fetch(`${upstreamUrl}?${query}`, { signal });
  if (!res.ok) throw await StepError.fromResponse(res);
  return /** @type {Promise<SearchResult>} */ (res.json());
}

/**
 * The correction hook, called when the policy answers CORRECT (a 4xx that
 * fixed parameters may cure): ask analyzeError for a fix and merge its
 * suggestedChanges (only the changed keys) into the parameters. The runner
 * passes an error it throws on to runStep's caller unchanged.
 *
 * @param {SearchParams} params
 * @param {unknown} error
 * @returns {Promise<SearchParams>}
 */
async function correct(params, error) {
  if (!(error instanceof StepError)) throw error; // CORRECT follows an HTTP answer
  const body = typeof error.body === "string" ? error.body : new TextDecoder().decode(error.body);
  const answer = await client.analyzeError({
    httpStatus: error.httpStatus,
    errorResponse: body,
    originalRequest: params,
    parameterSchema: SCHEMA,
    capabilityName: "search_hotels",
  });
  if (!answer.shouldRetry) throw new NoSafeCorrection(answer.reason);
  console.log(`correction: ${JSON.stringify(answer.suggestedChanges)} (${answer.reason})`);
  return { ...params, ...answer.suggestedChanges };
}

try {
  const found = await runStep(client, { city_code: city, nights: 2 }, searchHotels, {
    capability: "search_hotels",
    upstream: "hotel-api",
    deadlineMs: 30_000, // no retry is made whose wait would pass it
    correct,
  });
  const names = found.hotels.map((hotel) => hotel.name).join(", ");
  console.log(`${found.hotels.length} hotels in ${found.city_code}: ${names}`);
} catch (error) {
  if (error instanceof StepFailedError) {
    // The policy ended the step: `decision` says why, `cause` is the step's
    // last error.
    const { reason, explanation } = error.decision;
    const last = error.cause instanceof Error ? error.cause.message : String(error.cause);
    console.log(`step failed: StepFailedError: ${reason} after ${error.calls} calls: ${explanation} (last error: ${last})`);
  } else if (error instanceof NoSafeCorrection) {
    console.log(`step stopped: ${error.message}`);
  } else {
    throw error;
  }
  process.exitCode = 1;
} finally {
  // Close the client before exiting: it sends the outcomes still queued.
  await client.close();
}
