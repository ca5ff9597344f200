/**
 * `tpm.clock` across claims of one gateway on swtpm. Claims are numbered in close order and each
 * quote is taken at session open, so when sessions overlap the previous claim's quote is later
 * than this claim's. Every interleaving of opens and closes must verify against its previous
 * claim. A rollback is still refused where the order is known: a session opened after the
 * previous claim was issued (its preimage's opened_after_claim) whose quote is before that
 * claim's — made real by restoring the swtpm state to an earlier copy — and a quote presented as
 * newer than a later quote of the same TPM (`--previous-quote`, whose order the relying party
 * asserts).
 */
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VerificationReport } from '@cmcp/verify';
import { verifyClaim, verifyTpmEvidence } from '@cmcp/verify';
import { runVerify } from '@cmcp/verify/cli';
import type { Claim } from '@cmcp/verify/formats';
import { fromB64u } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type SwtpmInstance, startSwtpm as startSwtpmCore } from '../testing/swtpm.js';
import { startSwtpm, swtpmRunContext } from '../testing/vitest-swtpm.js';
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
/** TPMS_CLOCK_INFO of a claim's quote (TPM 2.0 Part 2 §10.12.8: after qualifiedSigner and extraData). */
function clockInfo(c: Claim): { clock: bigint; resetCount: number; restartCount: number } {
  const a = Buffer.from(fromB64u(c.evidence.tpm?.attest ?? ''));
  const at = 6 + 2 + a.readUInt16BE(6);
  const ci = at + 2 + a.readUInt16BE(at);
  return {
    clock: a.readBigUInt64BE(ci),
    resetCount: a.readUInt32BE(ci + 8),
    restartCount: a.readUInt32BE(ci + 12),
  };
}
const quoteClock = (c: Claim): bigint => clockInfo(c).clock;
const cliDir = mkdtempSync(join(tmpdir(), 'cmcp-clock-cli-'));
afterAll(() => rmSync(cliDir, { recursive: true, force: true }));
async function verifyCli(claim: Claim, previous: Claim) {
  const put = (c: Claim) => {
    const p = join(cliDir, `claim-${c.claim_sequence}.json`);
    writeFileSync(p, JSON.stringify(c));
    return p;
  };
  let out = '';
  let err = '';
  const code = await runVerify(
    put(claim),
    { previousClaim: put(previous), json: true, require: 'hardware-unanchored' },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, err, report: JSON.parse(out || '{"checks":[]}') as VerificationReport };
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
  let lastIssued: number | null = null;
  for (const [name, steps, expectedOverlaps] of scripts) {
    it(name, async () => {
      const sids = new Map<string, string>();
      const opened: string[] = [];
      const claims: [string, Claim][] = [];
      const openedAfter = new Map<string, number | null>();
      for (const s of steps) {
        const who = s.slice(1);
        if (s[0] === 'o') {
          openedAfter.set(who, lastIssued);
          sids.set(who, await open());
          opened.push(who);
        } else {
          const claim = await close(sids.get(who) as string);
          claims.push([who, claim]);
          // the preimage names the newest claim issued when the session opened
          expect(claim.binding.preimage.opened_after_claim).toBe(openedAfter.get(who));
          lastIssued = claim.claim_sequence;
        }
      }
      let overlapped = 0;
      for (let i = 1; i < claims.length; i++) {
        const [[pw, prev], [cw, cur]] = [claims[i - 1], claims[i]] as [[string, Claim], [string, Claim]];
        expect(cur.claim_sequence).toBe(prev.claim_sequence + 1);
        const r = verifyClaim(cur, { previousClaim: prev });
        expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
        expect(r.verdict).toBe('hardware-unanchored');
        // and through `cmcp verify --previous-claim`
        const cli = await verifyCli(cur, prev);
        expect(cli.code, cli.err).toBe(0);
        expect(cli.report.checks.find((c) => c.id === 'tpm.clock')?.status).toBe(
          r.checks.find((c) => c.id === 'tpm.clock')?.status,
        );
        // this claim's session opened before the previous claim's: its quote is the earlier one
        const openedFirst = opened.indexOf(cw) < opened.indexOf(pw);
        expect(quoteClock(cur) < quoteClock(prev)).toBe(openedFirst);
        const c = clockCheck(cur, prev);
        if (openedFirst) {
          overlapped++;
          expect(c).toMatchObject({ status: 'not-applicable', reason_code: 'QUOTE_ORDER_UNKNOWN' });
        } else {
          expect(c?.status).toBe('pass');
          // opened after the previous claim was issued: compared as the later quote
          if ((cur.binding.preimage.opened_after_claim ?? -1) >= prev.claim_sequence)
            expect(c?.detail).toMatch(/not before the previous quote/);
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

describe('a real rollback across claims: the swtpm state restored to an earlier copy', () => {
  it('a session opened after the previous claim was issued, quoted by a TPM whose state went back → TPM_CLOCK_ROLLBACK', async () => {
    const ctx = await swtpmRunContext();
    const work = mkdtempSync(join(tmpdir(), 'cmcp-rollback-'));
    const state = join(work, 'state');
    const saved = join(work, 'saved');
    cpSync(ctx.templateStateDir, state, { recursive: true });
    rmSync(join(state, '.lock'), { force: true });
    const upstream = await startCountingServer();
    let sw: SwtpmInstance | undefined;
    let g: Gateway | undefined;
    const cfgDir = mkdtempSync(join(tmpdir(), 'cmcp-rollback-gw-'));
    // one gateway database throughout; each start names the running swtpm
    const start = async () => {
      sw = await startSwtpmCore({ stateDir: state, pidRegistryDir: ctx.pidRegistryDir });
      const c = await writeConfig({
        dir: cfgDir,
        upstreams: [{ name: 'c', transport: 'http', url: upstream.url }],
        attestation: { provider: 'tpm', tcti: sw.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 1, 2, 7] },
      });
      g = await startInProcess(c);
      return g;
    };
    const stop = async () => {
      await g?.close();
      await sw?.stop();
      g = undefined;
      sw = undefined;
    };
    const session = async (gw: Gateway): Promise<Claim> => {
      const s = await rest(gw.url, TOKEN, 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      const r = await rest(gw.url, TOKEN, 'POST', `/sessions/${s.body.session_id as string}/close`);
      expect(r.status).toBe(200);
      return r.body as Claim;
    };
    try {
      // first start: the instance AK is made persistent in the TPM state; that state is the copy
      await session(await start());
      await stop();
      cpSync(state, saved, { recursive: true });
      // the TPM runs on: a session quoted well after start-up
      const gw2 = await start();
      await pause(3000);
      const x = await session(gw2);
      await stop();
      // the state is put back: the same reset epoch again, its clock from the copy
      rmSync(state, { recursive: true, force: true });
      cpSync(saved, state, { recursive: true });
      const y = await session(await start());
      await stop();
      const [cx, cy] = [clockInfo(x), clockInfo(y)];
      expect(y.claim_sequence).toBe(x.claim_sequence + 1);
      expect(y.binding.preimage.opened_after_claim).toBe(x.claim_sequence);
      expect([cy.resetCount, cy.restartCount]).toEqual([cx.resetCount, cx.restartCount]);
      expect(cy.clock).toBeLessThan(cx.clock);
      const r = verifyClaim(y, { previousClaim: x });
      expect(r.checks.find((c) => c.id === 'tpm.clock')).toMatchObject({
        status: 'fail',
        reason_code: 'TPM_CLOCK_ROLLBACK',
      });
      expect(r.verdict).toBe('invalid');
    } finally {
      await stop();
      await upstream.close();
      rmSync(work, { recursive: true, force: true });
      cleanup(cfgDir);
    }
  }, 60_000);
});
