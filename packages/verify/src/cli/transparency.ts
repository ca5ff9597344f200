/**
 * The receipt and consistency commands (docs/spec/transparency.md, docs/verification.md#receipts-and-checkpoints):
 *
 *   cmcp-verify receipt <receipt|answer> [--entry <entry|bundle>] [--claim <claim>] [--key <jwk-file|vkey>]…
 *     [--checkpoint <note>]… [--consistency <answer>]… [--require <verdict>] [--trust-store …]
 *     [--reference-values …] [--at …] [--json]
 *   cmcp-verify consistency <checkpoint>… [--claim <claim>] [--key …]… [--consistency <answer>]…
 *     [--audit <bundle>] [--require …] [--json]
 *
 * The gateway key comes from a claim the gateway signed with it (its verification binds the key
 * to hardware evidence; any session's claim of the same gateway process) or from `--key`. A
 * receipt file may be the receipt itself or the JSON-RPC answer that carried it
 * (`result._meta["dev.cmcp/evidence"]`, `error.data.evidence`). Exit codes: 0 accepted, 1 not
 * (invalid, pending, or a claim verdict below `--require`), 2 unreadable input or usage error.
 */
import type { Command } from 'commander';
import { verifyCheckpoints } from '../checkpoints.js';
import type { Ed25519Jwk } from '../format/binding.js';
import { b64u } from '../format/canonical.js';
import { verifyReceipt } from '../receipt.js';
import { renderJson, renderText } from '../render.js';
import type { VerificationReport } from '../result.js';
import { parseVerifierKey } from '../transparency/note.js';
import { type ConsistencyProofJson, EVIDENCE_META_KEY } from '../transparency/receipt.js';
import { claimOptions, readJson } from './claim.js';
import { errorLine, processIo, readInputFile, VerifyInputError, type VerifyIo } from './input.js';
import { requiredVerdict } from './require.js';

/** Options both commands share, as commander parses them. */
export interface TransparencyCliOptions {
  claim?: string;
  key?: string[];
  consistency?: string[];
  require?: string;
  trustStore?: string;
  referenceValues?: string;
  at?: string;
  json?: boolean;
}

/** Options of the receipt command. */
export interface ReceiptCliOptions extends TransparencyCliOptions {
  entry?: string;
  checkpoint?: string[];
}

/** Options of the consistency command. */
export interface ConsistencyCliOptions extends TransparencyCliOptions {
  audit?: string;
}

const MAX_NOTE_BYTES = 64 * 1024;

/**
 * A `--key`: a C2SP verifier key (`<name>+<hex id>+<base64>`) or a file holding an Ed25519
 * public JWK. Claims and private keys are refused (as for `cmcp-verify claim --key`).
 * @throws VerifyInputError (VERIFY_KEY_INVALID).
 */
async function gatewayKey(value: string): Promise<Ed25519Jwk> {
  if (/^[^+\s]+\+[0-9a-f]{8}\+/.test(value)) {
    try {
      return { kty: 'OKP', crv: 'Ed25519', x: b64u(parseVerifierKey(value).publicKey) };
    } catch (e) {
      throw new VerifyInputError(
        `--key ${value.slice(0, 60)}: ${(e as Error).message} (VERIFY_KEY_INVALID)`,
        'VERIFY_KEY_INVALID',
      );
    }
  }
  const jwk = (await readJson(value, '--key')) as Record<string, unknown> | null;
  const bad = (why: string) =>
    new VerifyInputError(`--key ${value} ${why} (VERIFY_KEY_INVALID)`, 'VERIFY_KEY_INVALID');
  if (jwk === null || typeof jwk !== 'object') throw bad('is not a JWK');
  if ('cnf' in jwk || 'signature' in jwk) throw bad('is a claim, not a key: pass it with --claim');
  if ('d' in jwk) throw bad('holds a private key: pin the public JWK only');
  if (
    jwk.kty !== 'OKP' ||
    jwk.crv !== 'Ed25519' ||
    typeof jwk.x !== 'string' ||
    !/^[A-Za-z0-9_-]{43}$/.test(jwk.x)
  )
    throw bad('is not an Ed25519 public JWK (kty OKP, crv Ed25519, x)');
  return { kty: 'OKP', crv: 'Ed25519', x: jwk.x };
}

/** A checkpoint note file, as text. */
async function readNote(path: string): Promise<string> {
  return (await readInputFile(path, 'checkpoint', MAX_NOTE_BYTES)).toString('utf8');
}

/** The member at `path` of a JSON value, or undefined. */
function at(json: unknown, ...path: string[]): unknown {
  let v = json;
  for (const k of path)
    v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined;
  return v;
}

/** The receipt in a file: the receipt itself, or the answer (or its result / error) carrying it. */
function receiptOf(json: unknown): unknown {
  if (at(json, 'receipt_version') !== undefined) return json;
  const found =
    at(json, 'result', '_meta', EVIDENCE_META_KEY) ??
    at(json, '_meta', EVIDENCE_META_KEY) ??
    at(json, 'error', 'data', 'evidence') ??
    at(json, 'data', 'evidence');
  if (found === undefined)
    throw new VerifyInputError('the receipt file holds no receipt (nor an answer carrying one)');
  return found;
}

/** The entry for a receipt from a file: one `{canonical, entry_hash}`, or a bundle (its entry at the receipt's sequence number). */
function entryOf(json: unknown, receipt: unknown): unknown {
  const entries = (json as { entries?: unknown } | null)?.entries;
  if (!Array.isArray(entries)) return json;
  const seq = (receipt as { sequence_number?: unknown } | null)?.sequence_number;
  const hit = entries.find((e) => {
    try {
      return (
        (JSON.parse((e as { canonical: string }).canonical) as { sequence_number?: unknown })
          .sequence_number === seq
      );
    } catch {
      return false;
    }
  });
  if (hit === undefined)
    throw new VerifyInputError(`the bundle holds no entry of sequence number ${String(seq)}`);
  return hit;
}

/** Reads what both commands share: the key source and the consistency answers. */
async function shared(opts: TransparencyCliOptions) {
  const minimum = requiredVerdict(opts.require, 'hardware-attested');
  const vopts = claimOptions(opts);
  if (minimum !== 'invalid') vopts.require = minimum;
  const pinnedKeys = await Promise.all((opts.key ?? []).map(gatewayKey));
  const claim = opts.claim === undefined ? undefined : await readJson(opts.claim, 'claim');
  if (claim === undefined && pinnedKeys.length === 0)
    throw new VerifyInputError(
      'give the gateway key: --claim <claim> (bound by its evidence) or --key <jwk-file|vkey>',
    );
  const consistency = (await Promise.all(
    (opts.consistency ?? []).map((p) => readJson(p, 'consistency proof')),
  )) as ConsistencyProofJson[];
  return { pinnedKeys, consistency, claimOptions: vopts, ...(claim !== undefined ? { claim } : {}) };
}

/** Prints a report and returns the exit code. */
function finish(report: VerificationReport, opts: TransparencyCliOptions, io: VerifyIo): number {
  io.stdout(opts.json ? renderJson(report) : renderText(report));
  return report.accepted ? 0 : 1;
}

/** Runs the receipt command; returns its exit code (0, 1 or 2). Never throws. */
export async function runVerifyReceipt(
  receiptPath: string,
  opts: ReceiptCliOptions,
  io: VerifyIo = processIo(),
  label = 'cmcp-verify receipt',
): Promise<number> {
  try {
    const base = await shared(opts);
    const receipt = receiptOf(await readJson(receiptPath, 'receipt'));
    const entry =
      opts.entry === undefined ? undefined : entryOf(await readJson(opts.entry, 'entry'), receipt);
    const checkpoints = await Promise.all((opts.checkpoint ?? []).map(readNote));
    return finish(
      verifyReceipt(receipt, { ...base, checkpoints, ...(entry !== undefined ? { entry } : {}) }),
      opts,
      io,
    );
  } catch (err) {
    io.stderr(errorLine(label, err));
    return 2;
  }
}

/** Runs the consistency command; returns its exit code (0, 1 or 2). Never throws. */
export async function runVerifyConsistency(
  checkpointPaths: string[],
  opts: ConsistencyCliOptions,
  io: VerifyIo = processIo(),
  label = 'cmcp-verify consistency',
): Promise<number> {
  try {
    const base = await shared(opts);
    const notes = await Promise.all(checkpointPaths.map(readNote));
    const bundle = opts.audit === undefined ? undefined : await readJson(opts.audit, 'audit bundle');
    return finish(
      verifyCheckpoints(notes, { ...base, ...(bundle !== undefined ? { bundle } : {}) }),
      opts,
      io,
    );
  } catch (err) {
    io.stderr(errorLine(label, err));
    return 2;
  }
}

const repeat = (v: string, prev: string[] = []) => [...prev, v];

/** The options both commands take. */
function sharedOptions(cmd: Command): Command {
  return cmd
    .option(
      '--claim <file>',
      'a claim signed by the gateway key (any session of that gateway): binds the key to its evidence',
    )
    .option(
      '--key <jwk-file|vkey>',
      'a pinned gateway key: Ed25519 public JWK file or C2SP verifier key (repeatable)',
      repeat,
    )
    .option('--consistency <file>', 'a GET /sessions/{id}/consistency answer (repeatable)', repeat)
    .option(
      '--require <verdict>',
      "the claim's weakest accepted verdict: hardware-attested (default), hardware-unanchored or signed-only",
    )
    .option(
      '--trust-store <file>',
      "pinned roots for the claim (default: the package's attestation/trust-store.yaml)",
    )
    .option('--reference-values <file>', 'reference values YAML for the claim')
    .option('--at <time>', 'verification time (RFC 3339) for certificate validity (default: now)')
    .option('--json', 'print the report as JSON')
    .exitOverride((err) => {
      process.exit(err.exitCode === 0 ? 0 : 2);
    });
}

/** Adds `receipt` and `consistency` to `program` (as `name` and `consistencyName`). */
export function registerTransparencyCommands(
  program: Command,
  name = 'receipt',
  consistencyName = 'consistency',
): void {
  sharedOptions(
    program
      .command(name)
      .description(
        "verify a call's receipt offline: its entry is in the session's signed tree; exit 1 if not, 2 on unreadable input",
      )
      .argument('<receipt>', 'the receipt JSON, or the JSON-RPC answer that carried it')
      .option('--entry <file>', 'the entry ({canonical, entry_hash}) or the session audit bundle')
      .option(
        '--checkpoint <file>',
        'another signed checkpoint of the session, checked for equivocation (repeatable)',
        repeat,
      ),
  ).action(async (path: string, opts: ReceiptCliOptions) => {
    process.exitCode = await runVerifyReceipt(path, opts, processIo(), `${program.name()} ${name}`);
  });
  sharedOptions(
    program
      .command(consistencyName)
      .description('verify signed checkpoints of one session against each other: exit 1 on equivocation')
      .argument('<checkpoints...>', 'signed checkpoint note files')
      .option(
        '--audit <bundle>',
        "the session's audit bundle: each checkpoint must be the root of its entries",
      ),
  ).action(async (paths: string[], opts: ConsistencyCliOptions) => {
    process.exitCode = await runVerifyConsistency(
      paths,
      opts,
      processIo(),
      `${program.name()} ${consistencyName}`,
    );
  });
}
