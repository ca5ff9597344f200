/**
 * A budget of event-loop time for long work done in slices (a batch of closes, a chain read for
 * its claim in pages): the loop runs other work (probes, calls) between slices.
 */

/**
 * Longest stretch one slice of a batch of closes holds the event loop before yielding,
 * milliseconds (between closes; a chain's summary yields after every page). With the other
 * work of the same turn (a probe, a call) it stays within the ~3 ms a close may hold the loop
 * with a young-generation scavenge in it.
 */
export const SLICE_MS = 0.5;

/** A budget of event-loop time: {@link pause} yields once the current slice has run out. */
export class LoopSlice {
  private started = performance.now();

  constructor(private readonly sliceMs = SLICE_MS) {}

  /** Yields to I/O and timers (setImmediate) when the slice has lasted `sliceMs`; else returns at once. */
  async pause(): Promise<void> {
    if (performance.now() - this.started < this.sliceMs) return;
    await this.yieldNow();
  }

  /** Yields to I/O and timers (setImmediate) now and starts a new slice. */
  async yieldNow(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    this.started = performance.now();
  }
}
