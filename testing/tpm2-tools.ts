/**
 * Evidence files made by the real tpm2-tools binaries against a running swtpm, for the tests of
 * the verifier's file formats: EK and AK (`tpm2_createek`, `tpm2_createak`), the AK's public area
 * in every output form (`-f tss|pem|der`, `tpm2_readpublic -f tpmt`), the EK's Qualified Name
 * (`tpm2_readpublic -q`), quotes over the SHA-1/256/384/512 banks (`tpm2_quote -m -s -o`, with
 * `-f plain`) and PCR reads (`tpm2_pcrread -o`, `-F values|serialized`). The swtpm's banks are
 * allocated first (`tpm2_pcrallocate`, then a TPM reset through the control channel).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The swtpm to talk to: its TCTI string and command port (control channel = port + 1). */
export interface ToolsTpm {
  tcti: string;
  port: number;
}

/** Runs a tpm2-tools command on `tpm`, flushing transient objects after it; returns stdout. */
export function tpm2(tpm: ToolsTpm, cmd: string, args: string[], cwd: string): string {
  const env = { ...process.env, TPM2TOOLS_TCTI: tpm.tcti };
  const out = execFileSync(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] }).toString();
  execFileSync('tpm2_flushcontext', ['-t'], { cwd, env, stdio: 'ignore' });
  return out;
}

/** The PCR selection every quote here uses: all four banks, PCR 16 extended in each. */
export const TOOLS_SELECTION = 'sha1:0,1,16+sha256:0,1,16,23+sha384:0,16+sha512:0,16';

/**
 * Allocates the SHA-1/256/384/512 banks, resets the TPM (swtpm_ioctl -i) and starts it, then
 * extends PCR 16 and 23 in every bank with fixed digests.
 */
export function allocateAllBanks(tpm: ToolsTpm, cwd: string): void {
  tpm2(tpm, 'tpm2_pcrallocate', ['sha1:all+sha256:all+sha384:all+sha512:all'], cwd);
  execFileSync('swtpm_ioctl', ['--tcp', `127.0.0.1:${tpm.port + 1}`, '-i'], { stdio: 'ignore' });
  tpm2(tpm, 'tpm2_startup', ['-c'], cwd);
  const d = (n: number, b: string) => b.repeat(n);
  for (const [pcr, b] of [
    ['16', 'a1'],
    ['23', 'b2'],
  ] as const) {
    tpm2(
      tpm,
      'tpm2_pcrextend',
      [`${pcr}:sha1=${d(20, b)},sha256=${d(32, b)},sha384=${d(48, b)},sha512=${d(64, b)}`],
      cwd,
    );
  }
}

/** One AK's files and a quote by it, all as tpm2-tools wrote them. */
export interface ToolsQuote {
  dir: string;
  /** `tpm2_createak -u` (TPM2B_PUBLIC), `tpm2_readpublic -f tpmt|pem|der`. */
  akTss: string;
  akTpmt: string;
  akPem: string;
  akDer: string;
  /** `tpm2_createek -u` (the parent's TPM2B_PUBLIC) and `tpm2_readpublic -q` of the EK. */
  ekPub: string;
  ekQname: string;
  /** `tpm2_quote -m` (TPMS_ATTEST), `-s` (TPMT_SIGNATURE), `-o` (serialized PCRs). */
  msg: string;
  sig: string;
  pcrs: string;
  /** The same quote's signature as `-f plain` is a second quote: its own message and signature. */
  plainMsg: string;
  plainSig: string;
  plainPcrs: string;
  /** `tpm2_pcrread -o` over the same selection: `-F values` and `-F serialized`. */
  pcrreadValues: string;
  pcrreadSerialized: string;
  nonce: string;
}

/**
 * Creates the EK (RSA, once per `dir`) and an AK with `alg`/`hash`/`scheme` under it, and quotes
 * {@link TOOLS_SELECTION} with qualifyingData `nonce` (hex) in both signature forms.
 */
export function toolsQuote(
  tpm: ToolsTpm,
  root: string,
  tag: string,
  ak: { alg: 'ecc' | 'rsa'; hash: 'sha256' | 'sha384'; scheme: 'ecdsa' | 'rsassa' | 'rsapss' },
  nonce: string,
): ToolsQuote {
  const dir = join(root, tag);
  mkdirSync(dir, { recursive: true });
  const t = (cmd: string, ...args: string[]) => tpm2(tpm, cmd, args, dir);
  t('tpm2_createek', '-c', 'ek.ctx', '-G', 'rsa', '-u', 'ek.pub');
  t('tpm2_readpublic', '-c', 'ek.ctx', '-q', 'ek.qname');
  t(
    'tpm2_createak',
    '-C',
    'ek.ctx',
    '-c',
    'ak.ctx',
    '-G',
    ak.alg,
    '-g',
    ak.hash,
    '-s',
    ak.scheme,
    '-u',
    'ak.tss',
  );
  t('tpm2_readpublic', '-c', 'ak.ctx', '-f', 'tpmt', '-o', 'ak.tpmt');
  t('tpm2_readpublic', '-c', 'ak.ctx', '-f', 'pem', '-o', 'ak.pem');
  t('tpm2_readpublic', '-c', 'ak.ctx', '-f', 'der', '-o', 'ak.der');
  const q = [
    'tpm2_quote',
    '-c',
    'ak.ctx',
    '-l',
    TOOLS_SELECTION,
    '-q',
    nonce,
    '-g',
    ak.hash,
    '--scheme',
    ak.scheme,
  ] as const;
  t(...q, '-m', 'q.msg', '-s', 'q.sig', '-o', 'q.pcrs');
  t(...q, '-m', 'p.msg', '-s', 'p.sig', '-f', 'plain', '-o', 'p.pcrs');
  t('tpm2_pcrread', TOOLS_SELECTION, '-o', 'pcrread.values');
  t('tpm2_pcrread', TOOLS_SELECTION, '-F', 'serialized', '-o', 'pcrread.serialized');
  const p = (f: string) => join(dir, f);
  return {
    dir,
    akTss: p('ak.tss'),
    akTpmt: p('ak.tpmt'),
    akPem: p('ak.pem'),
    akDer: p('ak.der'),
    ekPub: p('ek.pub'),
    ekQname: p('ek.qname'),
    msg: p('q.msg'),
    sig: p('q.sig'),
    pcrs: p('q.pcrs'),
    plainMsg: p('p.msg'),
    plainSig: p('p.sig'),
    plainPcrs: p('p.pcrs'),
    pcrreadValues: p('pcrread.values'),
    pcrreadSerialized: p('pcrread.serialized'),
    nonce,
  };
}

/** Reads a file of a {@link ToolsQuote}. */
export const readTool = (path: string): Buffer => readFileSync(path);
