/**
 * The measurement PCR's event log (docs/spec/measurement.md#event-log): every extend a cmcp
 * gateway makes into the measurement PCR is appended to one JSON-lines file shared by every
 * gateway on the same TPM, like a TCG event log. A claim carries the events from its own
 * gateway's extend up to the quoted PCR value, so a relying party can replay them:
 * PCR = SHA-256(…SHA-256(pcr_before ‖ own digest)… ‖ later digest) (TPM 2.0 Part 3 §22.2).
 *
 * The file is not trusted: whatever it says is checked by the replay against the quoted PCR.
 * An extend and its append happen under an exclusive lock file, and a gateway reads the log
 * under the same lock *after* its quote, so every extend that reached the PCR before the quote
 * is in the log by the time it is read.
 */
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { PcrEventJson } from '@cmcp/verify/formats';
import { b64u } from '@cmcp/verify/formats';
import { pcrExtend } from './index.js';

/** One line of the log file: the event a claim carries, and what the extender saw. */
interface StoredEvent extends PcrEventJson {
  /** Random id: how a gateway finds its own extend again. */
  id: string;
  pcr: number;
  /** base64url PCR values read just before and after the extend. */
  pcr_before: string;
  pcr_after: string;
  host: string;
  pid: number;
  at: string;
}

const LOCK_WAIT_MS = 3000;
/** A lock older than this was left by a process that died holding it. */
const LOCK_STALE_MS = 10_000;

/** True when the lock names a process on this host that no longer runs (it was killed holding it). */
function holderGone(lock: string): boolean {
  const [host, pid] = readFileSync(lock, 'utf8').split(' ');
  if (host !== hostname() || !pid || !/^\d+$/.test(pid)) return false;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The default log for a TCTI and PCR: under the OS temp folder, which a reboot (TPM reset) clears. */
export function defaultEventLogPath(tcti: string, pcr: number): string {
  const safe = Buffer.from(tcti).toString('base64url').slice(0, 80);
  return join(tmpdir(), 'cmcp-pcr-events', `${safe}-pcr${pcr}.jsonl`);
}

export class PcrEventLog {
  constructor(private readonly file: string) {}

  private withLock<T>(fn: () => T): T {
    mkdirSync(dirname(this.file), { recursive: true, mode: 0o700 });
    const lock = `${this.file}.lock`;
    const deadline = Date.now() + LOCK_WAIT_MS;
    let fd: number | null = null;
    while (fd === null) {
      try {
        fd = openSync(lock, 'wx', 0o600);
        writeSync(fd, `${hostname()} ${process.pid}`);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        try {
          if (Date.now() - statSync(lock).mtimeMs > LOCK_STALE_MS || holderGone(lock)) unlinkSync(lock);
        } catch {
          // removed by its holder meanwhile
        }
        if (Date.now() > deadline) throw new Error(`measurement event log lock ${lock} is held`);
        sleepSync(5);
      }
    }
    try {
      return fn();
    } finally {
      closeSync(fd);
      unlinkSync(lock);
    }
  }

  /**
   * Runs `extend` (read PCR, TPM2_PCR_Extend, read PCR) under the lock and appends the event.
   * When the PCR was all zeros before (TPM reset), earlier lines belong to a previous boot and
   * the file starts over.
   * @returns the event's id and the PCR values `extend` read.
   * @throws what `extend` throws (nothing is appended), or a file-system error.
   */
  extend(
    pcr: number,
    event: PcrEventJson,
    extend: () => { before: Buffer; after: Buffer },
  ): { event: string; before: Buffer; after: Buffer } {
    return this.withLock(() => {
      const { before, after } = extend();
      const id = randomUUID();
      const line: StoredEvent = {
        ...event,
        id,
        pcr,
        pcr_before: b64u(before),
        pcr_after: b64u(after),
        host: hostname(),
        pid: process.pid,
        at: new Date().toISOString(),
      };
      const fromReset = before.every((b) => b === 0);
      const fd = openSync(this.file, fromReset ? 'w' : 'a', 0o600);
      try {
        writeSync(fd, `${JSON.stringify(line)}\n`);
      } finally {
        closeSync(fd);
      }
      return { event: id, before, after };
    });
  }

  /**
   * The events from the one with `id` onwards whose replay from `before` reaches `quoted`
   * (read under the lock, after the quote). Null when the log does not explain the quoted
   * value (someone extended without logging, or the log was lost): the claim then carries only
   * its own event and the relying party's replay fails, as it should.
   */
  since(id: string, pcr: number, before: Buffer, quoted: Buffer): PcrEventJson[] | null {
    const lines = this.withLock(() => {
      try {
        return readFileSync(this.file, 'utf8').split('\n');
      } catch {
        return [];
      }
    });
    const events: StoredEvent[] = [];
    for (const l of lines) {
      try {
        const e = JSON.parse(l) as StoredEvent;
        if (e && e.pcr === pcr && typeof e.digest === 'string') events.push(e);
      } catch {
        // a torn or foreign line: the replay decides
      }
    }
    const start = events.findIndex((e) => e.id === id);
    if (start < 0) return null;
    let value = before;
    const out: PcrEventJson[] = [];
    for (const e of events.slice(start)) {
      value = pcrExtend(value, Buffer.from(e.digest.replace(/^sha256:/, ''), 'hex'));
      out.push({ digest: e.digest, event: e.event, instance: e.instance });
      if (value.equals(quoted)) return out;
    }
    return null;
  }
}
