// google.protobuf.Duration <-> milliseconds, and Python's round().
import type { Duration } from "./gen/google/protobuf/duration";

/** Milliseconds held by a Duration (fractional below one millisecond). */
export function durationToMs(d: Duration): number {
  return d.seconds * 1000 + d.nanos / 1e6;
}

/**
 * A Duration of `ms` milliseconds, rounded to whole microseconds as Python's
 * timedelta (which the daemon answers from) is.
 */
export function durationFromMs(ms: number): Duration {
  const totalMicros = roundHalfEven(ms * 1000);
  const negative = totalMicros < 0;
  const abs = Math.abs(totalMicros);
  const seconds = Math.floor(abs / 1e6);
  const nanos = (abs - seconds * 1e6) * 1000;
  return negative ? { seconds: -seconds, nanos: -nanos } : { seconds, nanos };
}

/** Python 3's round(): halves go to the even neighbour. */
export function roundHalfEven(x: number): number {
  if (!Number.isFinite(x)) return x;
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}
