// @squawk/client: the TypeScript client of the Squawk policy daemon. This is
// the package's whole public surface (test/surface.test.ts pins it); every
// other module is internal.
export { SquawkClient } from "./client";
export {
  DEFAULT_CHANNEL_OPTIONS,
  type Admission,
  type AdmitInput,
  type AnalyzeErrorInput,
  type CallOptions,
  type CheckDispatchInput,
  type ClassifyInput,
  type Decision,
  type DecideRetryBatchInput,
  type DecideRetryInput,
  type FallbackEvent,
  type GetEventsInput,
  type GetUpstreamsInput,
  type OutcomeInput,
  type ReportOutcomeInput,
  type SquawkClientOptions,
  type SquawkMethod,
} from "./options";
export { MAX_BATCH, type BatchResult } from "./batch";
export { OUTCOME_BATCH_DELAY_MS, OUTCOME_BATCH_SIZE } from "./client";
export { SquawkError, SquawkInputError } from "./errors";
export { type FallbackProfile } from "./fallback";
export { type BackoffConfig } from "./backoff";
export { durationFromMs, durationToMs } from "./duration";
export { StepError, type HeaderSource, type ResponseLike, type StepErrorInit } from "./steperror";
export { type ErrorInfo, type Tier } from "./hooks";
export {
  criticality,
  criticalityFromHeaders,
  runStep,
  StepFailedError,
  type DecisionSource,
  type RunStepOptions,
  type StepContext,
} from "./runner";
export { sleep, type Sleep } from "./wait";
export { squawkFetch, type FetchFunction, type SquawkFetch, type SquawkFetchOptions } from "./fetch";
export {
  Action,
  AnalysisSource,
  BreakerState,
  Criticality,
  ErrorCategory,
  EventKind,
  PaceSource,
  Reason,
  AdmitRequest,
  AdmitResponse,
  AnalyzeErrorRequest,
  AnalyzeErrorResponse,
  CheckDispatchRequest,
  CheckDispatchResponse,
  ClassifyRequest,
  ClassifyResponse,
  DecideRetryBatchRequest,
  DecideRetryBatchResponse,
  DecideRetryBatchResult,
  DecideRetryRequest,
  DecideRetryResponse,
  Event,
  ExplainDecisionRequest,
  ExplainDecisionResponse,
  FleetState,
  GetEventsRequest,
  GetEventsResponse,
  GetUpstreamsRequest,
  GetUpstreamsResponse,
  Outcome,
  RejectedChange,
  ReportOutcomeRequest,
  ReportOutcomeResponse,
  UpstreamState,
  Violation,
} from "./gen/squawk/v1/policy";
export type { Duration } from "./gen/google/protobuf/duration";
