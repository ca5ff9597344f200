/**
 * Several gateways on one TPM (issue 11 item 9; docs/spec/measurement.md#event-log), on swtpm:
 * a second `cmcp start` that fails with EADDRINUSE extends nothing; a second gateway that runs
 * extends the measurement PCR and logs the event; the first gateway's later claims carry the
 * event log and still verify; a tampered event log (re-signed, so only the log is wrong) is
 * rejected by the replay.
 */
import { createHash } from 'node:crypto';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VerificationReport } from '@cmcp/verify';
import { verifyClaim } from '@cmcp/verify';
import { type Claim, type MeasurementJson, signClaim } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { pcrExtend } from '../src/measure/index.js';
import { PcrEventLog } from '../src/measure/pcr-event-log.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let sw: Awaited<ReturnType<typeof startSwtpm>>;
const dirs: string[] = [];
const gateways: Gateway[] = [];
let logFile: string;

const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => `${c.id} ${c.reason_code}: ${c.detail}`);
const measurementOf = (c: Claim) => c.evidence.measurement as MeasurementJson;
const logLines = () =>
  existsSync(logFile) ? readFileSync(logFile, 'utf8').trim().split('\n').filter(Boolean) : [];

async function config(instance: string, port = 0): Promise<TestConfig> {
  const cfg = await writeConfig({
    port,
    attestation: {
      provider: 'tpm',
      tcti: sw.tcti,
      ak_algorithm: 'ecc-p256',
      pcrs: [0, 7],
      measurement_event_log: logFile,
    },
    extra: { instance_id: instance },
  });
  dirs.push(cfg.dir);
  return cfg;
}

async function closedClaim(gw: Gateway): Promise<Claim> {
  const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  expect(s.body.binding.status).toBe('bound');
  const c = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`, {});
  expect(c.status).toBe(200);
  return c.body as Claim;
}

beforeAll(async () => {
  sw = await startSwtpm();
  const d = mkdtempSync(join(tmpdir(), 'cmcp-pcr-log-'));
  dirs.push(d);
  logFile = join(d, 'pcr15.jsonl');
}, 60_000);

afterAll(async () => {
  for (const g of gateways) await g.close();
  await sw?.stop();
  for (const d of dirs) cleanup(d);
});

describe('measurement PCR event log (swtpm, two gateways on one TPM)', () => {
  let a: Gateway;

  it('the first gateway extends once it listens, and logs the event', async () => {
    a = await startInProcess(await config('gw-a'));
    gateways.push(a);
    const lines = logLines().map((l) => JSON.parse(l));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ digest: a.facts.gatewayMeasurement, instance: 'gw-a', pcr: 15 });
    const ext = a.chain.entries('gateway').filter((e) => e.entry_type === 'gateway_measurement_extended');
    expect(ext).toHaveLength(1);
    expect(ext[0]?.detail).toMatchObject({ instance: 'gw-a', provider_extend: { ok: true } });
    const claim = await closedClaim(a);
    expect(failed(verifyClaim(claim))).toEqual([]);
    expect(measurementOf(claim).pcr_events).toEqual([
      { digest: a.facts.gatewayMeasurement, event: 'cmcp.gateway_measurement', instance: 'gw-a' },
    ]);
  });

  it('a second start on the same port fails with EADDRINUSE and extends nothing', async () => {
    const port = Number(new URL(a.url).port);
    await expect(startInProcess(await config('gw-b', port))).rejects.toMatchObject({ code: 'EADDRINUSE' });
    expect(logLines()).toHaveLength(1);
    const r = verifyClaim(await closedClaim(a));
    expect(failed(r)).toEqual([]);
  });

  it('a second gateway that runs extends on top; the first one’s later claims carry both events and verify', async () => {
    const b = await startInProcess(await config('gw-b'));
    gateways.push(b);
    expect(logLines()).toHaveLength(2);
    const claimA = await closedClaim(a);
    const r = verifyClaim(claimA);
    expect(failed(r)).toEqual([]);
    expect(r.checks.find((c) => c.id === 'measurement.pcr')?.status).toBe('pass');
    expect(measurementOf(claimA).pcr_events?.map((e) => e.instance)).toEqual(['gw-a', 'gw-b']);
    expect(r.notes.join('\n')).toMatch(/extended 1 more time\(s\) after this gateway's measurement/);
    const claimB = await closedClaim(b);
    expect(failed(verifyClaim(claimB))).toEqual([]);
    expect(measurementOf(claimB).pcr_events?.map((e) => e.instance)).toEqual(['gw-b']);

    // Tampered event logs, re-signed with A's key so that only the log is wrong.
    const resign = (m: MeasurementJson): Claim => {
      const { signature: _s, ...unsigned } = claimA;
      return signClaim({ ...unsigned, evidence: { ...claimA.evidence, measurement: m } }, a.key.privateKey);
    };
    const m = measurementOf(claimA);
    const events = m.pcr_events ?? [];
    const dropped = verifyClaim(resign({ ...m, pcr_events: events.slice(0, 1) }));
    expect(dropped.checks.find((c) => c.id === 'claim.signature')?.status).toBe('pass');
    expect(failed(dropped).join('\n')).toMatch(/measurement\.pcr MEASUREMENT_PCR_MISMATCH/);
    const forged = verifyClaim(
      resign({ ...m, pcr_events: [events[0], { ...events[1], digest: m.digest }] as typeof events }),
    );
    expect(failed(forged).join('\n')).toMatch(/measurement\.pcr MEASUREMENT_PCR_MISMATCH/);
    const swapped = verifyClaim(resign({ ...m, pcr_events: [...events].reverse() }));
    expect(failed(swapped).join('\n')).toMatch(/measurement\.pcr MEASUREMENT_EVENT_LOG_INVALID/);
  });
});

afterAll(() => rmSync(logFile, { force: true }));

describe('PcrEventLog (a file, no TPM)', () => {
  const d = (s: string) => createHash('sha256').update(s).digest();
  const tag = (b: Buffer) => `sha256:${b.toString('hex')}`;
  it('replays from its own event to the quoted value, skips torn lines, restarts at reset, takes over a dead holder’s lock', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-pcr-log-unit-'));
    dirs.push(dir);
    const file = join(dir, 'log.jsonl');
    const log = new PcrEventLog(file);
    let pcr: Buffer = Buffer.alloc(32);
    const extend = (digest: Buffer) => () => {
      const before = pcr;
      pcr = pcrExtend(pcr, digest);
      return { before, after: pcr };
    };
    const ev = (name: string) => ({
      digest: tag(d(name)),
      event: 'cmcp.gateway_measurement',
      instance: name,
    });
    writeFileSync(file, '{"stale":"from a previous boot"}\n');
    const a = log.extend(15, ev('a'), extend(d('a')));
    expect(readFileSync(file, 'utf8')).not.toContain('previous boot'); // pcr_before zero: started over
    const afterA = pcr;
    appendFileSync(file, '{"torn'); // a line cut short by a crash
    appendFileSync(file, '\n');
    // A lock left by a process that no longer runs (pid 2^22 + 1 is beyond Linux's pid_max default).
    writeFileSync(`${file}.lock`, `${hostname()} 4194305`);
    log.extend(15, ev('b'), extend(d('b')));
    log.extend(15, ev('c'), extend(d('c')));
    expect(log.since(a.event, 15, a.before, afterA)?.map((e) => e.instance)).toEqual(['a']);
    expect(log.since(a.event, 15, a.before, pcrExtend(afterA, d('b')))?.map((e) => e.instance)).toEqual([
      'a',
      'b',
    ]);
    expect(log.since(a.event, 15, a.before, pcr)?.map((e) => e.instance)).toEqual(['a', 'b', 'c']);
    // A value the log cannot explain (an unlogged extend): null.
    expect(log.since(a.event, 15, a.before, pcrExtend(pcr, d('unlogged')))).toBeNull();
    expect(log.since('no-such-id', 15, a.before, pcr)).toBeNull();
  });
});
