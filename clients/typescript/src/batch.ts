// DecideRetryBatch answers, from the daemon or item by item from the fallback.
import { status } from "@grpc/grpc-js";
import { fieldFromMessage, SquawkError, SquawkInputError } from "./errors";
import type { DecideRetryBatchResponse, DecideRetryRequest } from "./gen/squawk/v1/policy";
import { decisionIdOf } from "./admission";
import type { Decision } from "./options";

/** The most requests one batch may carry; the daemon refuses more, and so does the fallback. */
export const MAX_BATCH = 10_000;

/** How many batch items share one call timeout: a large batch takes the daemon longer than one decision. */
export const BATCH_ITEMS_PER_TIMEOUT = 100;

/**
 * The answer to one item of a batch: a decision, or the refusal of that
 * item (its `field` is the item's path, e.g. "requests[3].attempt").
 */
export type BatchResult =
  | { readonly decision: Decision; readonly error?: undefined }
  | { readonly decision?: undefined; readonly error: SquawkInputError };

/** The daemon's answer as BatchResults, in request order. */
export function batchFromResponse(response: DecideRetryBatchResponse, requested: number): BatchResult[] {
  if (response.results.length !== requested) {
    throw new SquawkError(
      status.INTERNAL,
      `decideRetryBatch: the daemon answered ${response.results.length} results for ${requested} requests`,
    );
  }
  return response.results.map((result, i): BatchResult => {
    if (result.decision !== undefined) {
      return { decision: { ...result.decision, decisionId: decisionIdOf(result.decision.decisionId), fallback: false } };
    }
    if (result.error !== undefined) return { error: new SquawkInputError(fieldFromMessage(result.error), result.error) };
    throw new SquawkError(
      status.INTERNAL,
      `decideRetryBatch: the daemon answered requests[${i}] with neither a decision nor an error`,
    );
  });
}

/**
 * Each item decided by `decide` (the local fallback), a refused item named
 * by its path as the daemon names it. A batch over MAX_BATCH is refused whole.
 */
export function batchLocally(requests: readonly DecideRetryRequest[], decide: (request: DecideRetryRequest) => Decision): BatchResult[] {
  if (requests.length > MAX_BATCH) {
    throw new SquawkInputError("requests", `requests: ${requests.length} requests is over the limit of ${MAX_BATCH}`);
  }
  return requests.map((request, i): BatchResult => {
    try {
      return { decision: decide(request) };
    } catch (error) {
      if (!(error instanceof SquawkInputError)) throw error;
      const path = `requests[${i}]`;
      return { error: new SquawkInputError(`${path}.${error.field}`, `${path}.${error.message}`) };
    }
  });
}
