/**
 * Linux configfs-tsm report interface (Documentation/ABI/testing/configfs-tsm, Linux 6.7+):
 * `mkdir <root>/<entry>` creates a report request whose attributes are files —
 * `inblob` (write: 64 bytes of REPORT_DATA), `outblob` (read: the report / quote), `auxblob`
 * (read: SEV-SNP certificate table), `provider` (`sev_guest`, `tdx_guest`, …) and `generation`
 * (incremented by the kernel on every write, so a reader can detect a racing writer). `rmdir`
 * removes the entry.
 *
 * Protocol used here (as go-configfs-tsm does): read `generation` after mkdir (g0), write inblob
 * (expect g0 + 1), then after every attribute read check that `generation` is still g0 + 1.
 *
 * Two accommodations for trees that are not the kernel's (tests drive a fake tree from another
 * process) that change nothing on real configfs: attribute files missing right after mkdir
 * are waited for, and `generation` is polled until our write shows (the kernel increments it
 * synchronously in the write); an entry `rmdir` refuses as not empty is emptied first (configfs
 * removes attribute files itself and never answers ENOTEMPTY).
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readdir, readFile, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CmcpError } from '../errors.js';

/** Default configfs-tsm report directory. */
export const TSM_REPORT_ROOT = '/sys/kernel/config/tsm/report';

export type TsmErrorCode =
  /** The report directory does not exist (no configfs-tsm, or no TSM provider loaded). */
  | 'TSM_ABSENT'
  /** mkdir of the report entry failed. */
  | 'TSM_ENTRY_FAILED'
  /** The kernel refused the inblob write (EINVAL, EIO, EBUSY, …). */
  | 'TSM_WRITE_REFUSED'
  /** Reading an attribute failed, or the report was empty. */
  | 'TSM_READ_FAILED'
  /** `generation` moved by more than our own write: another writer raced us. */
  | 'TSM_GENERATION_CHANGED'
  /** `provider` is not the one the caller asked for. */
  | 'TSM_PROVIDER_MISMATCH'
  /** Nothing happened within the timeout. */
  | 'TSM_TIMEOUT';

/** A configfs-tsm failure; `code` is registered (NATIVE_ERRORS). */
export class TsmError extends CmcpError {
  declare readonly code: TsmErrorCode;

  constructor(
    code: TsmErrorCode,
    message: string,
    readonly errno: string | null = null,
  ) {
    super(code, message, errno === null ? {} : { errno });
    this.name = 'TsmError';
  }
}

export interface TsmReportRequest {
  /** Report directory (default {@link TSM_REPORT_ROOT}). */
  root?: string;
  /** Bytes for inblob (64 bytes of REPORT_DATA). */
  inblob: Buffer;
  /** Required `provider` value (e.g. `sev_guest`); null accepts any. */
  provider: string | null;
  /** Also read auxblob (absent → null). */
  auxblob: boolean;
  /** Overall time limit (default 10 s). */
  timeoutMs?: number;
}

export interface TsmReport {
  provider: string;
  outblob: Buffer;
  auxblob: Buffer | null;
  generation: number;
  /** The entry name used (already removed). */
  entry: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const errnoOf = (e: unknown) => (e as NodeJS.ErrnoException).code ?? null;

/** The attributes a report entry may hold (emptied on a non-configfs tree before rmdir). */
const ATTRIBUTES = [
  'inblob',
  'outblob',
  'auxblob',
  'provider',
  'generation',
  'privlevel',
  'privlevel_floor',
  'manifestblob',
  'service_provider',
  'service_guid',
  'service_manifest_version',
];

class Entry {
  constructor(
    readonly dir: string,
    readonly deadline: number,
  ) {}

  /** Reads an attribute, waiting while it does not exist yet (fake trees only). */
  async read(attr: string, optional = false): Promise<Buffer | null> {
    for (;;) {
      try {
        return await readFile(join(this.dir, attr));
      } catch (e) {
        if (errnoOf(e) !== 'ENOENT') {
          throw new TsmError(
            'TSM_READ_FAILED',
            `reading ${attr} failed: ${errnoOf(e) ?? (e as Error).message}`,
            errnoOf(e),
          );
        }
        if (optional) return null;
        if (Date.now() > this.deadline) throw new TsmError('TSM_TIMEOUT', `attribute ${attr} never appeared`);
        await sleep(5);
      }
    }
  }

  async generation(): Promise<number> {
    const text = ((await this.read('generation')) as Buffer).toString('latin1').trim();
    if (!/^\d{1,15}$/.test(text)) throw new TsmError('TSM_READ_FAILED', 'generation is not a decimal number');
    return Number(text);
  }

  /** Reads an attribute and checks `generation` is still `expected` afterwards. */
  async checkedRead(attr: string, expected: number, optional = false): Promise<Buffer | null> {
    const v = await this.read(attr, optional);
    const g = await this.generation();
    if (g !== expected) {
      throw new TsmError(
        'TSM_GENERATION_CHANGED',
        `generation was ${g} when expecting ${expected} after reading ${attr}: another writer used this entry`,
      );
    }
    return v;
  }

  async remove(): Promise<void> {
    try {
      await rmdir(this.dir);
    } catch (e) {
      if (errnoOf(e) === 'ENOENT') return;
      if (errnoOf(e) !== 'ENOTEMPTY' && errnoOf(e) !== 'EEXIST') throw e;
      // Not configfs: remove what a fake kernel put there, then the directory.
      for (const n of await readdir(this.dir)) {
        if (ATTRIBUTES.includes(n)) await rm(join(this.dir, n), { recursive: true, force: true });
      }
      await rmdir(this.dir);
    }
  }
}

/**
 * One configfs-tsm report: mkdir, write inblob, read outblob (+ auxblob) and provider with
 * generation checks, rmdir (always, also on failure).
 * @throws TsmError with a stable code.
 */
export async function tsmReport(req: TsmReportRequest): Promise<TsmReport> {
  const root = req.root ?? TSM_REPORT_ROOT;
  try {
    if (!(await stat(root)).isDirectory()) throw new Error('not a directory');
  } catch {
    throw new TsmError('TSM_ABSENT', `configfs-tsm report directory ${root} does not exist`);
  }
  const name = `cmcp-${randomUUID()}`;
  const dir = join(root, name);
  try {
    await mkdir(dir);
  } catch (e) {
    throw new TsmError('TSM_ENTRY_FAILED', `mkdir ${dir} failed: ${errnoOf(e) ?? 'error'}`, errnoOf(e));
  }
  const entry = new Entry(dir, Date.now() + (req.timeoutMs ?? 10_000));
  try {
    const g0 = await entry.generation();
    try {
      await writeFile(join(dir, 'inblob'), req.inblob);
    } catch (e) {
      throw new TsmError(
        'TSM_WRITE_REFUSED',
        `writing inblob was refused: ${errnoOf(e) ?? 'error'}`,
        errnoOf(e),
      );
    }
    const expected = g0 + 1;
    let g = await entry.generation();
    while (g === g0) {
      if (Date.now() > entry.deadline)
        throw new TsmError('TSM_TIMEOUT', 'generation never moved after the inblob write');
      await sleep(5);
      g = await entry.generation();
    }
    if (g !== expected) {
      throw new TsmError(
        'TSM_GENERATION_CHANGED',
        `generation went from ${g0} to ${g} after one write: another writer used this entry`,
      );
    }
    const outblob = (await entry.checkedRead('outblob', expected)) as Buffer;
    if (outblob.length === 0) throw new TsmError('TSM_READ_FAILED', 'outblob is empty');
    const auxblob = req.auxblob ? await entry.checkedRead('auxblob', expected, true) : null;
    const provider = ((await entry.checkedRead('provider', expected)) as Buffer).toString('latin1').trim();
    if (req.provider !== null && provider !== req.provider) {
      throw new TsmError(
        'TSM_PROVIDER_MISMATCH',
        `configfs-tsm provider is ${JSON.stringify(provider.slice(0, 40))}, not ${req.provider}`,
      );
    }
    return {
      provider,
      outblob,
      auxblob: auxblob && auxblob.length > 0 ? auxblob : null,
      generation: expected,
      entry: name,
    };
  } finally {
    await entry.remove().catch(() => undefined);
  }
}

/**
 * The `provider` of the configfs-tsm report interface (creates and removes one entry), or null
 * when there is no report directory. Used by `provider: auto`.
 * @throws TsmError when the directory exists but no entry can be made or read.
 */
export async function tsmProvider(root = TSM_REPORT_ROOT, timeoutMs = 3000): Promise<string | null> {
  try {
    if (!(await stat(root)).isDirectory()) return null;
  } catch {
    return null;
  }
  const dir = join(root, `cmcp-probe-${randomUUID()}`);
  try {
    await mkdir(dir);
  } catch (e) {
    throw new TsmError('TSM_ENTRY_FAILED', `mkdir ${dir} failed: ${errnoOf(e) ?? 'error'}`, errnoOf(e));
  }
  const entry = new Entry(dir, Date.now() + timeoutMs);
  try {
    return ((await entry.read('provider')) as Buffer).toString('latin1').trim();
  } finally {
    await entry.remove().catch(() => undefined);
  }
}
