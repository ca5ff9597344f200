/**
 * `tpm.clock` across claims of one gateway on swtpm. Claims are numbered in close order and each
 * quote is taken at session open, so when sessions overlap the previous claim's quote is later
 * than this claim's. Every interleaving of opens and closes must verify against its previous
 * claim; a quote presented as newer than a later quote of the same TPM (`--previous-quote`, whose
 * order the relying party asserts) is still a rollback.
 */
import { createHash } from 'node:crypto';
import { verifyClaim } from '@cmcp/verify/claim';
import { verifyTpmEvidence } from '@cmcp/verify/evidence';
import { fromB64u } from '@cmcp/verify/format/canonical';
import type { Claim } from '@cmcp/verify/format/claim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/runtime.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let tpm: Awaited<ReturnType<typeof startSwtpm>>;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  up = await startCountingServer();
  tpm = await startSwtpm();
  cfg = await writeConfig({
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 1, 2, 7] },
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await tpm?.stop();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

const TOKEN = 'alice-token';
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function open(): Promise<string> {
  const s = await rest(gw.url, TOKEN, 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  await pause(30); // the next open's quote reads a later TPM clock
  return s.body.session_id as string;
}
async function close(sid: string): Promise<Claim> {
  const r = await rest(gw.url, TOKEN, 'POST', `/sessions/${sid}/close`);
  expect(r.status).toBe(200);
  return r.body as Claim;
}
/** TPMS_CLOCK_INFO.clock of a claim's quote (TPM 2.0 Part 2 §10.12.8: after qualifiedSigner and extraData). */
function quoteClock(c: Claim): bigint {
  const a = Buffer.from(fromB64u(c.evidence.tpm?.attest ?? ''));
  const at = 6 + 2 + a.readUInt16BE(6);
  return a.readBigUInt64BE(at + 2 + a.readUInt16BE(at));
}
const clockCheck = (claim: Claim, previousClaim: Claim) =>
  verifyClaim(claim, { previousClaim }).checks.find((c) => c.id === 'tpm.clock');

describe('tpm.clock against the previous claim: any close order of real swtpm sessions', () => {
  // each script: o = open, c = close, by session letter; claims come out in close order; the
  // count is of claims whose session opened before the previous claim's
  const scripts: [string, string[], number][] = [
    ['A opens, B opens, B closes, A closes', ['oA', 'oB', 'cB', 'cA'], 1],
    ['A opens, B opens, A closes, B closes', ['oA', 'oB', 'cA', 'cB'], 0],
    ['A, B, C open; C, A, B close', ['oA', 'oB', 'oC', 'cC', 'cA', 'cB'], 1],
    ['A, B, C open; C, B, A close', ['oA', 'oB', 'oC', 'cC', 'cB', 'cA'], 2],
    ['A opens, B opens, B closes, C opens, A closes, C closes', ['oA', 'oB', 'cB', 'oC', 'cA', 'cC'], 1],
  ];
  for (const [name, steps, expectedOverlaps] of scripts) {
    it(name, async () => {
      const sids = new Map<string, string>();
      const opened: string[] = [];
      const claims: [string, Claim][] = [];
      for (const s of steps) {
        const who = s.slice(1);
        if (s[0] === 'o') {
          sids.set(who, await open());
          opened.push(who);
        } else claims.push([who, await close(sids.get(who) as string)]);
      }
      let overlapped = 0;
      for (let i = 1; i < claims.length; i++) {
        const [[pw, prev], [cw, cur]] = [claims[i - 1], claims[i]] as [[string, Claim], [string, Claim]];
        expect(cur.claim_sequence).toBe(prev.claim_sequence + 1);
        const r = verifyClaim(cur, { previousClaim: prev });
        expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
        expect(r.verdict).toBe('hardware-unanchored');
        // this claim's session opened before the previous claim's: its quote is the earlier one
        const openedFirst = opened.indexOf(cw) < opened.indexOf(pw);
        expect(quoteClock(cur) < quoteClock(prev)).toBe(openedFirst);
        const c = clockCheck(cur, prev);
        if (openedFirst) {
          overlapped++;
          expect(c).toMatchObject({ status: 'not-applicable', reason_code: 'QUOTE_ORDER_UNKNOWN' });
        } else {
          expect(c?.status).toBe('pass');
        }
      }
      expect(overlapped).toBe(expectedOverlaps);
    });
  }
});

describe('a real rollback is still refused', () => {
  it('an earlier swtpm quote presented after a later one (--previous-quote) is TPM_CLOCK_ROLLBACK', async () => {
    const first = await close(await open());
    const second = await close(await open());
    expect(quoteClock(second)).toBeGreaterThan(quoteClock(first));
    const t = (c: Claim) => c.evidence.tpm as NonNullable<Claim['evidence']['tpm']>;
    const evidence = (c: Claim, previous: Claim) =>
      verifyTpmEvidence({
        attest: fromB64u(t(c).attest),
        signature: fromB64u(t(c).signature),
        ak: { public: fromB64u(t(c).ak_public) },
        akParentQualifiedName: fromB64u(t(c).ak_parent_qualified_name),
        nonce: createHash('sha256').update(fromB64u(c.evidence.report_data)).digest(),
        pcrValues: t(c).pcr_selection.pcrs.map((index) => ({
          hashAlg: 0x000b, // TPM_ALG_SHA256
          index,
          value: fromB64u(t(c).pcr_values[String(index)] ?? ''),
        })),
        previousAttest: fromB64u(t(previous).attest),
      }).checks;
    expect(evidence(second, first).filter((x) => x.status === 'fail')).toEqual([]);
    const clock = (c: Claim, previous: Claim) => evidence(c, previous).find((x) => x.id === 'tpm.clock');
    expect(clock(second, first)?.status).toBe('pass');
    expect(clock(first, second)).toMatchObject({ status: 'fail', reason_code: 'TPM_CLOCK_ROLLBACK' });
    expect(clock(first, second)?.detail).toMatch(/clock went back within one reset and restart/);
  });
});
