// Deterministic sine-jitter backoff (docs/fallback.md), the formula of
// sidecar/core/squawk/policy/backoff.py; the numbers are generated.
import { roundHalfEven } from "./duration";
import { DEFAULT_BACKOFF_MS, SINE_JITTER } from "./fallback_table";

export interface BackoffConfig {
  /** First wait, in milliseconds (default 500). */
  readonly initialMs: number;
  /** Cap on every wait, in milliseconds (default 10,000). */
  readonly maxMs: number;
  /** Growth per attempt (default 2). */
  readonly factor: number;
}

export const DEFAULT_BACKOFF: BackoffConfig = Object.freeze({ ...DEFAULT_BACKOFF_MS });

/**
 * The wait after failed attempt `attempt` (1-based), in whole milliseconds:
 * min(min(initial * factor^(attempt-1), max) * (1 + 0.1 * sin(attempt)), max).
 * Whole milliseconds make the result identical in every language.
 */
export function backoffDelayMs(attempt: number, cfg: BackoffConfig = DEFAULT_BACKOFF): number {
  // Cap the exponent as the Python core does; an overflow becomes the cap.
  const exponent = Math.min(attempt - 1, 1024);
  let base = cfg.initialMs * Math.pow(cfg.factor, exponent);
  if (!Number.isFinite(base)) base = cfg.maxMs;
  base = Math.min(base, cfg.maxMs);
  const ms = Math.min(base * (1 + SINE_JITTER * Math.sin(attempt)), cfg.maxMs);
  return roundHalfEven(ms);
}
