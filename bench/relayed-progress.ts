/**
 * The latency a relayed progress notification adds (issue 10 item 10), side by side in one
 * run: the conformance fixture (testing/conformance/fixture-server.ts) is called directly and
 * through a gateway, interleaved, with the official SDK client. Each progress notification
 * carries its send time (same process, one clock), so the client measures its travel time;
 * the whole call is timed too, with progress (SSE through the gateway) and without (JSON).
 *
 * Run: `npm run build && bash scripts/with-node.sh node dist/bench/relayed-progress.js
 * [--calls N] [--steps N]` (also exported for bench/run.ts as `runRelayedProgressBench`).
 * Reports ratios and differences measured side by side; absolute numbers drift on shared machines.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import pino from 'pino';
import { parseConfig } from '../src/config/index.js';
import { startGateway } from '../src/gateway/runtime.js';
import { startFixtureServer } from '../testing/conformance/fixture-server.js';

function stats(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] as number;
  return { n: s.length, p50: q(0.5), p90: q(0.9), p99: q(0.99) };
}
const ms = (us: number) => `${(us / 1000).toFixed(3)} ms`;

async function connect(url: string, headers: Record<string, string> = {}): Promise<Client> {
  const c = new Client({ name: 'bench-progress', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return c;
}

interface PathSamples {
  /** Travel time of each progress notification, µs. */
  notification: number[];
  /** Whole tools/call with `steps` progress notifications, µs. */
  streamed: number[];
  /** Whole tools/call without a progress token (answered JSON through the gateway), µs. */
  plain: number[];
}

async function sample(c: Client, tool: string, steps: number, into: PathSamples): Promise<void> {
  let t0 = process.hrtime.bigint();
  await c.callTool({ name: tool, arguments: { steps } }, undefined, {
    onprogress: (p) => {
      const sent = /sent_ns=(\d+)/.exec(p.message ?? '')?.[1];
      if (sent) into.notification.push(Number(process.hrtime.bigint() - BigInt(sent)) / 1000);
    },
  });
  into.streamed.push(Number(process.hrtime.bigint() - t0) / 1000);
  t0 = process.hrtime.bigint();
  await c.callTool({ name: tool, arguments: { steps } });
  into.plain.push(Number(process.hrtime.bigint() - t0) / 1000);
}

/** Runs the scenario and prints its report. @param calls interleaved calls per path. */
export async function runRelayedProgressBench(calls = 200, steps = 5): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-bench-progress-'));
  const fixture = await startFixtureServer();
  const gw = await startGateway(
    parseConfig({
      dev_mode: true,
      listen: { host: '127.0.0.1', port: 0 },
      database: join(dir, 'cmcp.db'),
      attestation: { provider: 'software' },
      upstreams: [{ name: 'fx', transport: 'http', url: fixture.url }],
      metrics: { enabled: false },
    }),
    pino({ level: 'silent' }),
  );
  const direct = await connect(fixture.url);
  const via = await connect(`${gw.url}/mcp`);
  const d: PathSamples = { notification: [], streamed: [], plain: [] };
  const g: PathSamples = { notification: [], streamed: [], plain: [] };
  try {
    for (let i = 0; i < 20; i++) {
      // Warm-up (JIT, connections, the default session's genesis), not counted.
      await sample(direct, 'test_progress_steps', steps, { notification: [], streamed: [], plain: [] });
      await sample(via, 'fx.test_progress_steps', steps, { notification: [], streamed: [], plain: [] });
    }
    for (let i = 0; i < calls; i++) {
      // Interleaved, alternating which goes first, so drift hits both paths equally.
      if (i % 2 === 0) {
        await sample(direct, 'test_progress_steps', steps, d);
        await sample(via, 'fx.test_progress_steps', steps, g);
      } else {
        await sample(via, 'fx.test_progress_steps', steps, g);
        await sample(direct, 'test_progress_steps', steps, d);
      }
    }
  } finally {
    await direct.close();
    await via.close();
    await gw.close();
    await fixture.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const rows: [string, number[], number[]][] = [
    ['progress notification travel', d.notification, g.notification],
    [`tools/call with ${steps} progress notifications`, d.streamed, g.streamed],
    [`tools/call without progress`, d.plain, g.plain],
  ];
  console.log(`\nrelayed progress (${calls} interleaved calls per path, ${steps} notifications each)`);
  console.log(
    '                                          direct p50 / p90        via gateway p50 / p90      added p50',
  );
  for (const [name, a, b] of rows) {
    const x = stats(a);
    const y = stats(b);
    console.log(
      `  ${name.padEnd(40)} ${ms(x.p50)} / ${ms(x.p90)}   ${ms(y.p50)} / ${ms(y.p90)}   ${ms(y.p50 - x.p50)}`,
    );
  }
  const addedStreamed = stats(g.streamed).p50 - stats(d.streamed).p50;
  const addedPlain = stats(g.plain).p50 - stats(d.plain).p50;
  console.log(
    `  gateway cost, streamed path vs JSON path (p50 added): ${ms(addedStreamed)} vs ${ms(addedPlain)}`,
  );
  // Issue 10 item 10: the streamed path adds no more than the JSON path (5 % of the JSON path's
  // added p50 allowed for timer noise).
  console.log(
    `  ${addedStreamed <= addedPlain * 1.05 ? 'MET' : 'MISSED'} streamed path adds no more than the JSON path`,
  );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const arg = (name: string, dflt: number) => {
    const i = process.argv.indexOf(name);
    return i >= 0 ? Number(process.argv[i + 1]) : dflt;
  };
  await runRelayedProgressBench(arg('--calls', 200), arg('--steps', 5));
}
