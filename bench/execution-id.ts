/**
 * The execution_id section of `npm run bench` (bench/run.ts): what execution_id costs.
 *  1. Store level, per second (synchronous=FULL): the terminal commit alone (a call's cost before
 *     attempt records), the attempt record + terminal commit (a call without execution_id), and
 *     the admission with its attempt + terminal commit (with execution_id), interleaved.
 *  2. Call level: end-to-end latency of `tools/call` through the gateway to a real MCP server,
 *     with and without execution_id, interleaved in one run so that drift hits both equally.
 * Reports ratios measured side by side; absolute numbers drift on shared machines.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import pino from 'pino';
import { parseConfig } from '../src/config/index.js';
import { startGateway } from '../src/gateway/lifecycle/start.js';
import { AttemptLog } from '../src/store/sqlite/attempts.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import {
  groupCommitStats,
  immediate,
  immediateAsync,
  openDatabase,
  setGroupCommit,
} from '../src/store/sqlite/db.js';
import { ExecutionRegistry } from '../src/store/sqlite/executions.js';

export function stats(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] as number;
  return {
    n: s.length,
    p50: q(0.5),
    p90: q(0.9),
    p99: q(0.99),
    mean: s.reduce((a, b) => a + b, 0) / s.length,
  };
}
const fmt = (us: number) => `${(us / 1000).toFixed(3)} ms`;

/** The three store-level shapes of one call's durable writes (docs/spec/execution.md#attempts). */
type StoreVariant = 'terminal' | 'attempt' | 'admission';

const VARIANTS: { key: StoreVariant; label: string }[] = [
  { key: 'terminal', label: 'terminal commit alone (before attempts)' },
  { key: 'attempt', label: 'attempt + terminal (no execution_id)' },
  { key: 'admission', label: 'admission+attempt + terminal (execution_id)' },
];

/**
 * Store level, `n` interleaved rounds of the three variants (the order rotates each round so
 * that none always runs first). Each IMMEDIATE transaction is one commit, and with
 * synchronous=FULL in WAL mode one fsync of the WAL (auto-checkpoints add theirs to every row).
 */
export function storeBench(dir: string, n: number) {
  const db = openDatabase(join(dir, 'store.db'));
  const chain = new AuditChain(db);
  const reg = new ExecutionRegistry(db, 'bench');
  const attempts = new AttemptLog(db, 'bench');
  const run = (v: StoreVariant, i: number): number => {
    const callId = `call-${v}-${i}`;
    const executionId = v === 'admission' ? `exec-${i}` : null;
    const attempt = {
      callId,
      method: 'tools/call',
      upstream: 'b',
      agentId: 'bench',
      sessionId: 's',
      executionId,
      toolName: 't',
      requestPayloadHash: null,
      workflowId: null,
    };
    let commits = 0;
    if (v === 'attempt') {
      immediate(db, () => attempts.begin(attempt));
      commits++;
    } else if (executionId !== null) {
      immediate(db, () => {
        reg.admit({
          agentId: 'bench',
          executionId,
          binding: `sha256:${'0'.repeat(64)}`,
          callId,
          sessionId: 's',
          toolName: 't',
        });
        attempts.begin(attempt);
      });
      commits++;
    }
    immediate(db, () => {
      const e = chain.append('s', {
        entry_type: 'tool_call',
        call_id: callId,
        execution_id: executionId,
        disposition: 'completed',
      });
      if (executionId !== null) reg.finish('bench', executionId, callId, 'completed', e.entry_hash);
      if (v !== 'terminal') attempts.end(callId);
    });
    return commits + 1;
  };
  for (let i = 0; i < 60; i++) run(VARIANTS[i % 3]?.key as StoreVariant, 1_000_000 + i); // warm-up
  const ns = { terminal: 0n, attempt: 0n, admission: 0n };
  const commits = { terminal: 0, attempt: 0, admission: 0 };
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < 3; k++) {
      const v = VARIANTS[(i + k) % 3]?.key as StoreVariant;
      const t0 = process.hrtime.bigint();
      commits[v] += run(v, i);
      ns[v] += process.hrtime.bigint() - t0;
    }
  }
  db.close();
  const perS = (v: StoreVariant) => (n * 1e9) / Number(ns[v]);
  for (const { key, label } of VARIANTS)
    console.log(
      `store: ${label.padEnd(44)} ${perS(key).toFixed(0).padStart(6)} calls/s  ` +
        `${(commits[key] / n).toFixed(0)} fsync/call  (${(perS(key) / perS('terminal')).toFixed(2)}× of terminal alone)`,
    );
  console.log(
    '  (calls per second at the store, synchronous=FULL WAL in a temp SQLite file, interleaved; an\n' +
      '   fsync per IMMEDIATE commit. Every call now writes its attempt before the upstream runs: with an\n' +
      '   execution_id inside the admission transaction, without one in a transaction of its own)',
  );
}

/**
 * Store level with calls in flight together: `concurrency` callers each record an attempt, hop
 * through the event loop (the upstream's stand-in), then commit the terminal entry with the
 * attempt's end, through immediateAsync, with group commit off (each write its own transaction)
 * and on (store/sqlite/group-commit.ts). Commits per call are counted by the queue (off: 2 by
 * construction); under synchronous=FULL each commit is one fsync of the WAL.
 */
export async function storeConcurrentBench(dir: string, calls: number, concurrency: number) {
  const run = async (on: boolean) => {
    const db = openDatabase(join(dir, `store-gc-${on ? 'on' : 'off'}.db`));
    setGroupCommit(db, on);
    const chain = new AuditChain(db);
    const attempts = new AttemptLog(db, 'bench');
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < calls; i = next++) {
        const callId = `call-${i}`;
        await immediateAsync(db, () =>
          attempts.begin({
            callId,
            method: 'tools/call',
            upstream: 'b',
            agentId: 'bench',
            sessionId: 's',
            executionId: null,
            toolName: 't',
            requestPayloadHash: null,
            workflowId: null,
          }),
        );
        await new Promise((r) => setImmediate(r));
        await immediateAsync(db, () => {
          chain.append('s', { entry_type: 'tool_call', call_id: callId, disposition: 'completed' });
          attempts.end(callId);
        });
      }
    };
    const t0 = process.hrtime.bigint();
    await Promise.all(Array.from({ length: concurrency }, worker));
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const commits = groupCommitStats(db)?.transactions ?? 2 * calls;
    db.close();
    return { perS: calls / s, commitsPerCall: commits / calls };
  };
  const off = await run(false);
  const on = await run(true);
  for (const [label, r] of [
    ['off', off],
    ['on', on],
  ] as const)
    console.log(
      `store: ${`${concurrency} in flight, group commit ${label}`.padEnd(44)} ${r.perS.toFixed(0).padStart(6)} calls/s  ` +
        `${r.commitsPerCall.toFixed(2)} commits/call  (${(r.perS / off.perS).toFixed(2)}× of group commit off)`,
    );
}

export async function upstreamServer() {
  const http = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const server = new McpServer({ name: 'bench', version: '1' });
    server.registerTool('noop', { description: 'returns at once' }, async () => ({
      content: [{ type: 'text', text: 'ok' }],
    }));
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => void transport.close());
    await server.connect(transport);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    await transport.handleRequest(req, res, JSON.parse(Buffer.concat(chunks).toString('utf8')));
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  return { http, url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp` };
}

/** Call level, `n` interleaved pairs through an in-process gateway. */
export async function callBench(dir: string, n: number) {
  const up = await upstreamServer();
  const gw = await startGateway(
    parseConfig({
      dev_mode: true,
      listen: { host: '127.0.0.1', port: 0 },
      database: join(dir, 'gw.db'),
      upstreams: [{ name: 'b', transport: 'http', url: up.url }],
      attestation: { provider: 'software' },
      sessions: { default_max_calls: 1_000_000 },
    }),
    pino({ level: 'silent' }),
  );
  const call = async (i: number, correlated: boolean) => {
    const t0 = process.hrtime.bigint();
    const r = await fetch(`${gw.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: i,
        method: 'tools/call',
        params: {
          name: 'b.noop',
          arguments: { i },
          ...(correlated ? { _cmcp: { execution_id: `bench-${i}` } } : {}),
        },
      }),
    });
    const body = (await r.json()) as { result?: unknown };
    if (!body.result) throw new Error(`call failed: ${JSON.stringify(body)}`);
    return Number(process.hrtime.bigint() - t0) / 1000;
  };
  for (let i = 0; i < 50; i++) await call(-1 - i, false);
  const plain: number[] = [];
  const corr: number[] = [];
  for (let i = 0; i < n; i++) {
    // Alternate the order so neither variant always runs second.
    if (i % 2) {
      plain.push(await call(i, false));
      corr.push(await call(i, true));
    } else {
      corr.push(await call(i, true));
      plain.push(await call(i, false));
    }
  }
  await gw.close();
  up.http.closeAllConnections();
  up.http.close();
  const p = stats(plain);
  const c = stats(corr);
  console.log(
    `call: without execution_id  p50 ${fmt(p.p50)}  p90 ${fmt(p.p90)}  p99 ${fmt(p.p99)}  (n=${p.n})`,
  );
  console.log(
    `call: with execution_id     p50 ${fmt(c.p50)}  p90 ${fmt(c.p90)}  p99 ${fmt(c.p99)}  (n=${c.n})`,
  );
  console.log(`call: added latency p50 ${fmt(c.p50 - p.p50)}  (ratio ${(c.p50 / p.p50).toFixed(2)}×)`);
  console.log(
    '  (a real tools/call POSTed with fetch → in-process gateway → local Streamable HTTP upstream,\n' +
      '   software provider; the latency is from request to response at the client)',
  );
}

/** Both parts, in a temporary folder it removes. */
export async function runExecutionIdBench(n: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-bench-'));
  try {
    console.log('== execution_id and attempt records: durable writes per call ==');
    storeBench(dir, n);
    await storeConcurrentBench(dir, n * 4, 64);
    await callBench(dir, n);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
