/**
 * RFC 3339 UTC timestamps with microseconds. Wall-clock milliseconds from Date plus a
 * sub-millisecond part from the monotonic clock; chains additionally clamp to their last
 * timestamp so a clock stepping backwards never makes a chain's timestamps decrease.
 */
import { performance } from 'node:perf_hooks';

/** Injectable clock (tests step it backwards). Returns microseconds since the epoch. */
export type MicroClock = () => bigint;

/** Default clock: Date.now() ms and the sub-ms fraction of performance.now(). */
export const systemMicroClock: MicroClock = () => {
  const ms = BigInt(Date.now());
  const frac = BigInt(Math.floor((performance.now() % 1) * 1000));
  return ms * 1000n + frac;
};

/** Formats epoch microseconds as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (fixed width, so it sorts as text). */
export function formatMicros(us: bigint): string {
  const ms = Number(us / 1000n);
  const micro = Number(us % 1000n);
  const iso = new Date(ms).toISOString(); // YYYY-MM-DDTHH:MM:SS.mmmZ
  return `${iso.slice(0, 23)}${String(micro).padStart(3, '0')}Z`;
}
