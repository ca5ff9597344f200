/**
 * The V8 fatal of the load-stability test (test/load-stability.test.ts) without a network: `PolicyEngine.evaluate` (which calls cedar-wasm)
 * in a hot loop on the example bundle, an idle pause, then the hot loop again, in this process.
 * On Node 20.20 (V8 11.3) the second loop can die with `Fatal error … unreachable code` in
 * `Deoptimizer::DoComputeBuiltinContinuation`: evaluate's optimised code, with the JS→Wasm call
 * inlined, is invalidated while that call is on the stack and its lazy de-optimisation cannot
 * rebuild the JS-to-Wasm frame. Run with `--trace-deopt` to see the events. No assertion of
 * speed; exit 0 when it survives.
 *
 *   node [--trace-deopt] dist/bench/load/policy-evaluate.js [CALLS=50000] [IDLE_S=75]
 */
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadBundleDir } from '../../src/policy/bundle.js';
import { PolicyEngine, type PolicyRequest, type ToolFacts } from '../../src/policy/engine.js';
import { REPO_ROOT } from './profile.js';

const engine = new PolicyEngine(loadBundleDir(join(REPO_ROOT, 'examples', 'policy')), 'enforcing');
const TOOLS: ToolFacts[] = [
  {
    exposedName: 'fs.read_text_file',
    server: 'fs',
    toolName: 'read_text_file',
    sensitivity: 'confidential',
    annotations: { readOnlyHint: true, openWorldHint: false },
  },
  {
    exposedName: 'everything.echo',
    server: 'everything',
    toolName: 'echo',
    sensitivity: 'public',
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
  {
    exposedName: 'fs.write_file',
    server: 'fs',
    toolName: 'write_file',
    sensitivity: 'confidential',
    annotations: { readOnlyHint: false, destructiveHint: true },
  },
];
// Argument shapes vary as real calls do (the type feedback evaluate is optimised on).
const ARGUMENTS: ((i: number) => Record<string, unknown>)[] = [
  (i) => ({ path: `/w/outbox/f${i}` }),
  (i) => ({ message: `m${i}` }),
  (i) => ({ path: `/w/x${i}`, content: 'x'.repeat(i % 50) }),
  (i) => ({ a: i, b: i + 0.5 }),
  (i) => ({ list: [i, 's', true], nested: { k: null, j: i } }),
];

function round(n: number, name: string): void {
  const t0 = Date.now();
  const count = { allow: 0, deny: 0 };
  for (let i = 0; i < n; i++) {
    const req: PolicyRequest = {
      agentId: 'load-agent',
      agentAttributes: { team: 'eng', roles: ['writer'] },
      tool: TOOLS[i % TOOLS.length] as ToolFacts,
      arguments: (ARGUMENTS[(i >> 3) % ARGUMENTS.length] as (i: number) => Record<string, unknown>)(i),
      workflowId: i % 7 === 0 ? `wf${i}` : null,
      session: { calls: i % 600, maxSensitivity: i % 2 ? 'confidential' : 'public' },
    };
    count[engine.evaluate(req).decision] += 1;
  }
  console.log(
    `${name}: ${n} evaluations in ${Date.now() - t0} ms (${JSON.stringify(count)}), node ${process.version}`,
  );
}

const calls = Number(process.argv[2] ?? 50_000);
const idleS = Number(process.argv[3] ?? 75);
round(calls, 'load 1');
await sleep(idleS * 1000);
round(calls, 'load 2');
console.log('survived');
