// @squawk/client: the TypeScript client of the Squawk policy daemon.
export {
  SquawkClient,
  DEFAULT_CHANNEL_OPTIONS,
  type CallOptions,
  type ClassifyInput,
  type Decision,
  type DecideRetryInput,
  type FallbackEvent,
  type SquawkClientOptions,
  type SquawkMethod,
} from "./client";
export { SquawkError, SquawkInputError } from "./errors";
export { fallbackClassify, fallbackDecide, validateDecideRequest, DEFAULT_FALLBACK_PROFILE, type FallbackProfile } from "./fallback";
export { fallbackProfileFromEnv, parseGoDuration } from "./env";
export { backoffDelayMs, DEFAULT_BACKOFF, type BackoffConfig } from "./backoff";
export { retryAfterMs, parseHttpDate } from "./headers";
export { redact, REDACTED } from "./redact";
export { durationFromMs, durationToMs } from "./duration";
export {
  runStep,
  sleep,
  StepError,
  StepFailedError,
  type DecisionSource,
  type ErrorVerdict,
  type HeaderSource,
  type ResponseLike,
  type RunStepOptions,
  type Sleep,
  type StepContext,
  type StepErrorInit,
  type StepFailureInfo,
} from "./runner";
export {
  Action,
  ErrorCategory,
  Reason,
  actionToJSON,
  errorCategoryToJSON,
  reasonToJSON,
  ClassifyRequest,
  ClassifyResponse,
  DecideRetryRequest,
  DecideRetryResponse,
} from "./gen/squawk/v1/policy";
export type { Duration } from "./gen/google/protobuf/duration";
