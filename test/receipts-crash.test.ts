/**
 * A receipt survives a SIGKILL between its entry's commit and its checkpoint
 * (docs/spec/transparency.md#checkpoints): a `cmcp start` process signs a checkpoint covering a
 * first call, answers a second call, and is killed before the window that would sign the second
 * one ends. Started again on the same database (a new gateway key), it serves the second call's
 * receipt: its checkpoint verifies under the new key, its inclusion proof under that
 * checkpoint's root, and the consistency proof from the earlier checkpoint (signed by the killed
 * process's key) to it verifies too — the tree the restart continued is the one it had signed.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  entryLeafHash,
  type ReceiptJson,
  readChainCheckpoint,
  verifyChainCheckpoint,
  verifyConsistency,
  verifyInclusion,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  cleanup,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

let counter: CountingServer;
let cfg: TestConfig;
let gw: ChildGateway | null = null;

beforeAll(async () => {
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  counter = await startCountingServer();
  cfg = await writeConfig({
    port: await freePort(),
    upstreams: [{ name: 'counter', transport: 'http', url: counter.url }],
    // Wide: the kill comes milliseconds after the answer, long before this window ends.
    sessions: { checkpoint_window_ms: 3000 },
  });
});

afterAll(async () => {
  await gw?.stop('SIGKILL');
  await counter?.close();
  cleanup(cfg.dir);
});

async function call(url: string, sid: string): Promise<ReceiptJson> {
  const r = await rpc(url, 'alice-token', {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'counter.record', arguments: {}, _cmcp: { session_id: sid } },
  });
  return r.body.result._meta['dev.cmcp/evidence'] as ReceiptJson;
}

/** The gateway key of a running process: the `cnf` of a claim it signs (a session opened and closed). */
async function processKey(url: string) {
  const sid = (await rest(url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
  return (await rest(url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body.cnf.jwk;
}

it('serves, after a SIGKILL and a restart, the receipt of a call whose checkpoint was never signed', async () => {
  gw = await startChild(cfg);
  const firstKey = await processKey(gw.url);
  const sid = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
  const first = (await rest(gw.url, 'alice-token', 'GET', (await call(gw.url, sid)).fetch as string))
    .body as ReceiptJson;
  const earlier = verifyChainCheckpoint(first.inclusion?.checkpoint as string, [firstKey]);
  expect(earlier).not.toBeNull();
  const pending = await call(gw.url, sid);
  expect(pending.leaf_index).toBeGreaterThanOrEqual(earlier?.checkpoint.size as number);
  await gw.stop('SIGKILL');

  gw = await startChild(cfg);
  const secondKey = await processKey(gw.url);
  const r = await rest(gw.url, 'alice-token', 'GET', pending.fetch as string);
  expect(r.status).toBe(200);
  const receipt = r.body as ReceiptJson;
  expect(receipt.entry_hash).toBe(pending.entry_hash);
  const later = verifyChainCheckpoint(receipt.inclusion?.checkpoint as string, [secondKey]);
  expect(later).not.toBeNull();
  expect(verifyChainCheckpoint(receipt.inclusion?.checkpoint as string, [firstKey])).toBeNull();
  const size = receipt.inclusion?.tree_size as number;
  const proof = (receipt.inclusion?.inclusion_proof ?? []).map((h) => Buffer.from(h, 'hex'));
  expect(
    verifyInclusion(
      entryLeafHash(pending.entry_hash),
      pending.leaf_index,
      size,
      proof,
      later?.checkpoint.root as Buffer,
    ),
  ).toBe(true);

  const from = earlier?.checkpoint.size as number;
  const c = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/consistency?from=${from}&to=${size}`);
  expect(c.status).toBe(200);
  expect(readChainCheckpoint(c.body.checkpoint).root).toEqual(later?.checkpoint.root);
  const cproof = (c.body.consistency_proof as string[]).map((h) => Buffer.from(h, 'hex'));
  expect(
    verifyConsistency(
      from,
      size,
      cproof,
      earlier?.checkpoint.root as Buffer,
      later?.checkpoint.root as Buffer,
    ),
  ).toBe(true);
}, 90_000);
