/**
 * Load-stability run of the full-profile gateway (docs/testing.md, Node.js; test/load-stability.test.ts), 127.0.0.1 only, bounded:
 * load (N calls), idle (S seconds, no request at all), load again, then optionally a timed run at
 * high concurrency. Prints per-phase counts, whether the gateway is still alive, and the audit
 * check; on a crash, the fatal lines of the gateway's stderr. Exit 0 only when the gateway
 * survived and every answered call has exactly one terminal audit entry.
 *
 *   node dist/bench/load-stability.js [--node BIN] [--node-arg=--flag ...] [--calls 10000]
 *     [--idle-s 75] [--calls2 10000] [--concurrency 64] [--soak-s 0] [--soak-concurrency 128] [--keep]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { checkAudit, type LoadResult, runLoad, summarize } from './load/drive.js';
import { startFullProfile } from './load/profile.js';

const { values: a } = parseArgs({
  options: {
    node: { type: 'string' },
    'node-arg': { type: 'string', multiple: true },
    calls: { type: 'string', default: '10000' },
    'idle-s': { type: 'string', default: '75' },
    calls2: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '64' },
    'soak-s': { type: 'string', default: '0' },
    'soak-concurrency': { type: 'string', default: '128' },
    keep: { type: 'boolean', default: false },
  },
});

const dir = mkdtempSync(join(tmpdir(), 'cmcp-load-'));
const gw = await startFullProfile({ dir, node: a.node, nodeArgs: a['node-arg'] ?? [] });
const { execFileSync } = await import('node:child_process');
const nodeVersion = execFileSync(a.node ?? process.execPath, ['--version'], { encoding: 'utf8' }).trim();
console.log(`gateway pid ${gw.gateway.pid} on Node ${nodeVersion} ${(a['node-arg'] ?? []).join(' ')}`);

const all: LoadResult[] = [];
const alive = () => gw.exit() === null;
const report = (name: string, r: LoadResult) => {
  all.push(r);
  console.log(
    `${name}: ${JSON.stringify(summarize(r))} in ${(r.elapsedMs / 1000).toFixed(1)} s ` +
      `(${r.callsPerSecond.toFixed(0)}/s); gateway ${alive() ? 'alive' : `DEAD ${JSON.stringify(gw.exit())}`}` +
      (r.transportFailure ? `; first transport failure: ${r.transportFailure}` : ''),
  );
};
const target = { url: gw.url, token: gw.token, readableFile: gw.readableFile };
const concurrency = Number(a.concurrency);
const tag = `run${Date.now()}`;

try {
  report(
    'load 1',
    await runLoad(target, { concurrency, maxCalls: Number(a.calls), maxMs: 600_000, tag: `${tag}-a` }),
  );
  if (alive()) {
    console.log(`idle ${a['idle-s']} s`);
    const until = Date.now() + Number(a['idle-s']) * 1000;
    while (Date.now() < until && alive()) await sleep(500);
    console.log(`after idle: gateway ${alive() ? 'alive' : `DEAD ${JSON.stringify(gw.exit())}`}`);
  }
  if (alive())
    report(
      'load 2',
      await runLoad(target, { concurrency, maxCalls: Number(a.calls2), maxMs: 600_000, tag: `${tag}-b` }),
    );
  if (alive() && Number(a['soak-s']) > 0)
    report(
      `soak ${a['soak-s']} s`,
      await runLoad(target, {
        concurrency: Number(a['soak-concurrency']),
        maxCalls: 1_000_000,
        maxMs: Number(a['soak-s']) * 1000,
        tag: `${tag}-c`,
      }),
    );
  const survived = alive();
  await sleep(1000);
  const log = gw.log();
  const fatal = log
    .split('\n')
    .filter((l) => /fatal|deoptimi|unreachable|Trace\/breakpoint|Illegal|Segmentation/i.test(l));
  console.log(`gateway ${survived ? 'survived' : `died: ${JSON.stringify(gw.exit())}`}`);
  if (fatal.length) console.log(`fatal lines in gateway output:\n  ${fatal.slice(0, 20).join('\n  ')}`);
  await gw.stop();
  const audit = checkAudit(
    gw.dbPath,
    all.flatMap((r) => r.records),
  );
  console.log(
    `audit: ${audit.answered} answered calls, ${audit.toolCallEntries} tool_call entries; ` +
      `missing ${audit.missing.length}, duplicated ${audit.duplicated.length}, ` +
      `mismatched ${audit.mismatched.length}, registry mismatch ${audit.registryMismatch.length}`,
  );
  const ok =
    survived &&
    audit.missing.length +
      audit.duplicated.length +
      audit.mismatched.length +
      audit.registryMismatch.length ===
      0;
  if (a.keep) console.log(`kept ${dir}`);
  process.exitCode = ok ? 0 : 1;
} finally {
  await gw.stop();
  if (!a.keep) rmSync(dir, { recursive: true, force: true });
}
