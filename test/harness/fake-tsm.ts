/**
 * A temporary fake configfs-tsm tree (`<dir>/report`) driven by a small fake "kernel" child
 * process (fake-tsm-kernel.mjs) that answers inblob writes with recorded evidence from
 * test/vectors: the go-sev-guest Milan report with its VCEK/ASK/ARK as a GHCB certificate
 * table, or the go-tdx-guest SPR DCAP quote. It exercises our file ABI handling (entries,
 * generation, provider, auxblob), not signatures.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildCertTable, SNP_CERT_GUIDS } from '../../native/tsm/snp.js';
import { certsFromBytes } from '../../src/tee/x509.js';
import { vectorPath } from './vectors.js';

const KERNEL = join(dirname(fileURLToPath(import.meta.url)), 'fake-tsm-kernel.mjs');

export type FakeTsmMode = 'echo' | 'stale' | 'race' | 'refuse-write' | 'silent';

export interface FakeTsm {
  /** The configfs-tsm report directory to configure as `tsm_path`. */
  root: string;
  dir: string;
  stop(): Promise<void>;
}

/** The recorded SEV-SNP evidence: report and a GHCB certificate table (VCEK, ASK, ARK). */
export function snpRecorded(): { report: Buffer; certTable: Buffer; vcek: Buffer; ask: Buffer; ark: Buffer } {
  const report = readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'attestation.bin'));
  const vcek = readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'vcek.testcer'));
  const [ask, ark] = certsFromBytes(
    readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'ask_ark_milan.pem')),
  );
  if (!ask || !ark) throw new Error('ask_ark_milan.pem: expected two certificates');
  const certTable = buildCertTable([
    { guid: SNP_CERT_GUIDS.vcek, data: vcek },
    { guid: SNP_CERT_GUIDS.ask, data: ask },
    { guid: SNP_CERT_GUIDS.ark, data: ark },
  ]);
  return { report, certTable, vcek, ask, ark };
}

/** The recorded TDX DCAP v4 quote (with its 39 trailing bytes). */
export function tdxRecorded(): Buffer {
  return readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'));
}

/**
 * Starts a fake tree and kernel. `auxblob` overrides the certificate table (SNP), e.g. with a
 * malformed one; `provider` overrides the provider name the entries report.
 */
export async function startFakeTsm(opts: {
  kind: 'sev-snp' | 'tdx';
  mode?: FakeTsmMode;
  auxblob?: Buffer | null;
  provider?: string;
}): Promise<FakeTsm> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-fake-tsm-'));
  const root = join(dir, 'report');
  mkdirSync(root);
  const outPath = join(dir, 'recorded-outblob');
  let auxPath: string | null = null;
  if (opts.kind === 'sev-snp') {
    const rec = snpRecorded();
    writeFileSync(outPath, rec.report);
    const aux = opts.auxblob === undefined ? rec.certTable : opts.auxblob;
    if (aux) {
      auxPath = join(dir, 'recorded-auxblob');
      writeFileSync(auxPath, aux);
    }
  } else {
    writeFileSync(outPath, tdxRecorded());
  }
  const cfg = {
    root,
    provider: opts.provider ?? (opts.kind === 'sev-snp' ? 'sev_guest' : 'tdx_guest'),
    outblob: outPath,
    auxblob: auxPath,
    reportDataOffset: opts.kind === 'sev-snp' ? 0x50 : 0x238,
    mode: opts.mode ?? 'echo',
  };
  const child: ChildProcess = spawn(process.execPath, [KERNEL, JSON.stringify(cfg)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error('fake tsm kernel did not start')), 10_000);
    child.stdout?.once('data', () => {
      clearTimeout(t);
      ok();
    });
    child.once('exit', (code) => {
      clearTimeout(t);
      fail(new Error(`fake tsm kernel exited ${code}`));
    });
  });
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  return {
    root,
    dir,
    async stop() {
      process.off('exit', kill);
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((ok) => {
          child.once('exit', () => ok());
          child.kill('SIGTERM');
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
