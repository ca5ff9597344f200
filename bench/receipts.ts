/**
 * `npm run bench -- --receipts`: what receipts and signed checkpoints cost
 * (docs/spec/transparency.md). There is no switch that turns receipts off: every committed
 * session-chain entry extends its Merkle tree and every answer carries a receipt. What can be
 * separated is the checkpoint signing. Two in-process gateways on one local upstream: one signs
 * each window's checkpoint (`sessions.checkpoint_window_ms` 25, the default), the other has a
 * 10 s window, so no checkpoint is signed while the c=1 samples run. The added p50 at
 * concurrency 1 is the signing work on the call path (tree append and receipt building are in
 * both); at concurrency 64 the section reports calls/s of both and the checkpoints signed per
 * second (CheckpointSigner.signatures over the run).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch } from 'undici';
import { stats, upstreamServer } from './execution-id.js';
import { benchGateway } from './tls.js';

const TOKEN = 'bench-receipts-token';
const fmt = (us: number) => `${(us / 1000).toFixed(3)} ms`;

const gateway = (dir: string, name: string, upstream: string, windowMs: number) =>
  benchGateway(dir, name, upstream, TOKEN, {
    sessions: { default_max_calls: 10_000_000, checkpoint_window_ms: windowMs },
  });

/** One tools/call in `session`; microseconds. Throws unless the answer carries a receipt. */
async function call(url: string, dispatcher: Agent, session: string, i: number): Promise<number> {
  const t0 = process.hrtime.bigint();
  const r = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: i,
      method: 'tools/call',
      params: { name: 'b.noop', arguments: {}, _cmcp: { session_id: session } },
    }),
    dispatcher,
  });
  const body = (await r.json()) as { result?: { _meta?: Record<string, { entry_hash?: string }> } };
  if (!body.result?._meta?.['dev.cmcp/evidence']?.entry_hash)
    throw new Error(`call without a receipt: ${JSON.stringify(body).slice(0, 300)}`);
  return Number(process.hrtime.bigint() - t0) / 1000;
}

async function openSession(url: string, dispatcher: Agent): Promise<string> {
  const r = await fetch(`${url}/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ challenge: 'YmVuY2gtcmVjZWlwdHMtY2hhbGxlbmdl' }),
    dispatcher,
  });
  const body = (await r.json()) as { session_id?: string };
  if (!body.session_id) throw new Error(`POST /sessions: ${r.status} ${JSON.stringify(body)}`);
  return body.session_id;
}

/** Calls per second with `concurrency` callers for `ms`, each in a session of its own. */
async function throughput(url: string, dispatcher: Agent, concurrency: number, ms: number): Promise<number> {
  const sessions = await Promise.all(Array.from({ length: concurrency }, () => openSession(url, dispatcher)));
  let done = 0;
  const end = Date.now() + ms;
  await Promise.all(
    sessions.map(async (s, w) => {
      for (let i = 0; Date.now() < end; i++) {
        await call(url, dispatcher, s, w * 1_000_000 + i);
        done++;
      }
    }),
  );
  return done / (ms / 1000);
}

/** Runs the section; `n` interleaved pairs at concurrency 1, `ms` per throughput run. */
export async function runReceiptsBench(n = 1000, ms = 5000): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-bench-receipts-'));
  const up = await upstreamServer();
  const signing = await gateway(dir, 'signing', up.url, 25);
  const deferred = await gateway(dir, 'deferred', up.url, 10_000);
  const agent = new Agent({ connections: 128 });
  try {
    console.log('== Receipts: tools/call with checkpoints signed per 25 ms window, against a 10 s window ==');
    const sS = await openSession(signing.url, agent);
    const sD = await openSession(deferred.url, agent);
    for (let i = 0; i < 100; i++) {
      await call(signing.url, agent, sS, i);
      await call(deferred.url, agent, sD, i);
    }
    const before = deferred.checkpoints.signatures;
    const s: number[] = [];
    const d: number[] = [];
    for (let i = 0; i < n; i++) {
      const pair = [
        async () => s.push(await call(signing.url, agent, sS, i)),
        async () => d.push(await call(deferred.url, agent, sD, i)),
      ];
      if (i % 2) pair.reverse();
      for (const f of pair) await f();
    }
    const st = stats(s);
    const sd = stats(d);
    const unsigned = deferred.checkpoints.signatures - before;
    console.log(`c=1   signing  p50 ${fmt(st.p50)}  p99 ${fmt(st.p99)}  (n=${st.n})`);
    console.log(`c=1   deferred p50 ${fmt(sd.p50)}  p99 ${fmt(sd.p99)}  (n=${sd.n}, ${unsigned} signed)`);
    console.log(`c=1   added p50 of checkpoint signing ${fmt(st.p50 - sd.p50)}`);
    const sig0 = signing.checkpoints.signatures;
    const t0 = Date.now();
    const rs = await throughput(signing.url, agent, 64, ms);
    const sigPerS = (signing.checkpoints.signatures - sig0) / ((Date.now() - t0) / 1000);
    const rd = await throughput(deferred.url, agent, 64, ms);
    console.log(
      `c=64  signing ${rs.toFixed(0)} calls/s   deferred ${rd.toFixed(0)} calls/s   (${((rs / rd) * 100).toFixed(0)} %)`,
    );
    console.log(`c=64  checkpoints signed ${sigPerS.toFixed(0)}/s (64 sessions, 25 ms window)`);
  } finally {
    await agent.close();
    await signing.close();
    await deferred.close();
    up.http.closeAllConnections();
    up.http.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
