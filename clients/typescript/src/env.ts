// The pod's SQUAWK_STEP_RETRY_* overrides of the "default" profile, read as
// sidecar/core/squawk/policy/env.py's apply_env reads them, so the fallback waits as the
// daemon in the same pod would.
import { DEFAULT_FALLBACK_PROFILE, type FallbackProfile } from "./fallback";
import { roundHalfEven } from "./duration";
import { ENV_PREFIXES } from "./fallback_table";

const UNIT_MS: Readonly<Record<string, number>> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 };
const DURATION_PART = /([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)/g;
const DURATION_FULL = /^(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|µs|ms|s|m|h))+$/;

/** A Go-style duration ("500ms", "1s", "1m30s") in ms, or undefined. */
export function parseGoDuration(text: string): number | undefined {
  const t = text.trim();
  if (!DURATION_FULL.test(t)) return undefined;
  let ms = 0;
  for (const m of t.matchAll(DURATION_PART)) ms += Number(m[1]) * (UNIT_MS[m[2] as string] as number);
  // Whole microseconds, as the daemon keeps a duration: 1ns is zero.
  return roundHalfEven(ms * 1000) / 1000;
}

function positiveDuration(text: string): number | undefined {
  const ms = parseGoDuration(text);
  return ms !== undefined && ms > 0 ? ms : undefined;
}

function positiveInt(text: string): number | undefined {
  const t = text.trim();
  if (!/^[+-]?[0-9]+$/.test(t)) return undefined;
  const n = Number(t);
  return n >= 1 ? n : undefined;
}

function lookup(env: Readonly<Record<string, string | undefined>>, suffix: string): [string, string] | undefined {
  // The SQUAWK_ name wins when both are set.
  for (const prefix of ENV_PREFIXES) {
    const value = env[prefix + suffix];
    if (value !== undefined) return [prefix + suffix, value];
  }
  return undefined;
}

/**
 * The fallback profile with the environment's overrides. A bad value is
 * reported through `warn` and the default kept.
 */
export function fallbackProfileFromEnv(
  env: Readonly<Record<string, string | undefined>> = process.env,
  warn: (message: string) => void = (message) => process.emitWarning(message, "SquawkConfigWarning"),
): FallbackProfile {
  const defaults = DEFAULT_FALLBACK_PROFILE;
  let { initialMs, maxMs } = defaults.backoff;
  let maxAttempts = defaults.maxAttempts;
  const read = (suffix: string, parse: (text: string) => number | undefined, what: string): number | undefined => {
    const found = lookup(env, suffix);
    if (found === undefined) return undefined;
    const [name, raw] = found;
    const value = parse(raw);
    if (value === undefined) warn(`ignoring ${name}=${JSON.stringify(raw)}: expected ${what}; keeping the default`);
    return value;
  };
  initialMs = read("INITIAL_DELAY", positiveDuration, "a positive duration such as 500ms") ?? initialMs;
  maxMs = read("MAX_DELAY", positiveDuration, "a positive duration such as 10s") ?? maxMs;
  maxAttempts = read("MAX_ATTEMPTS", positiveInt, "an integer >= 1") ?? maxAttempts;
  if (maxMs < initialMs) {
    warn(`ignoring step retry delays: max delay ${maxMs} ms is below initial delay ${initialMs} ms`);
    ({ initialMs, maxMs } = defaults.backoff);
  }
  return { ...defaults, maxAttempts, backoff: { ...defaults.backoff, initialMs, maxMs } };
}
