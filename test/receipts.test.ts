/**
 * A receipt for every call (docs/spec/transparency.md#receipts), on a real gateway with real
 * upstreams: every answer to a data-carrying request (tools/call, resources/read, prompts/get,
 * completion/complete) and every refusal carries the entry's receipt, pending while its
 * window's checkpoint is not signed; `GET /sessions/{id}/receipts/{call_id}` answers the
 * complete receipt, whose checkpoint verifies under the gateway key and whose inclusion proof
 * leads from the entry's leaf to the checkpoint's root. A tampered leaf, a wrong index, another
 * root, another session's proof and another key do not verify. 200 concurrent calls each verify
 * their own receipt, with far fewer signatures than calls; consecutive checkpoints are consistent.
 */
import { generateKeyPairSync } from 'node:crypto';
import {
  ed25519PublicJwk,
  entryLeafHash,
  type ReceiptJson,
  verifyChainCheckpoint,
  verifyConsistency,
  verifyInclusion,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import type { ClientChannel } from '../src/relay/channel.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { type RelayServer, startRelayServer } from './fixtures/relay-server.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let counter: CountingServer;
let relayed: RelayServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  counter = await startCountingServer();
  relayed = await startRelayServer({ tag: 'v' });
  cfg = await writeConfig({
    upstreams: [
      { name: 'counter', transport: 'http', url: counter.url },
      { name: 'v', transport: 'http', url: relayed.url },
    ],
    sessions: { checkpoint_window_ms: 20 },
  });
  gw = await startInProcess(cfg);
});

afterAll(async () => {
  await gw?.close();
  await counter?.close();
  await relayed?.close();
  cleanup(cfg.dir);
});

const channel: ClientChannel = {
  streaming: false,
  notify: () => true,
  request: async () => {
    throw new Error('no client requests here');
  },
  signal: new AbortController().signal,
};

let nextId = 1;

/** One MCP request of alice's through the gateway's MCP layer; the JSON-RPC answer. */
async function mcp(method: string, params: Record<string, unknown>) {
  const r = await gw.mcp.handle(
    { agentId: 'alice', blocked: false },
    { jsonrpc: '2.0', id: nextId++, method, params },
    undefined,
    process.hrtime.bigint(),
    channel,
  );
  return r.body as {
    result?: { _meta?: Record<string, unknown> } & Record<string, unknown>;
    error?: { data?: { evidence?: ReceiptJson } };
  };
}

/** The receipt an answer carries: in `result._meta`, or a refusal's `error.data.evidence`. */
function evidenceOf(answer: Awaited<ReturnType<typeof mcp>>): ReceiptJson {
  const ev = (answer.result?._meta?.['dev.cmcp/evidence'] ?? answer.error?.data?.evidence) as ReceiptJson;
  expect(ev).toBeDefined();
  return ev;
}

async function openSession(): Promise<string> {
  return (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
}

/** What a relying party checks of a complete receipt, with the gateway key it trusts. */
function receiptVerifies(r: ReceiptJson, jwk = gw.key.jwk, entryHash = r.entry_hash): boolean {
  if (!r.inclusion) return false;
  const cp = verifyChainCheckpoint(r.inclusion.checkpoint, [jwk]);
  if (!cp || cp.checkpoint.chain_id !== r.chain_id || cp.checkpoint.size !== r.inclusion.tree_size)
    return false;
  const proof = r.inclusion.inclusion_proof.map((h) => Buffer.from(h, 'hex'));
  return verifyInclusion(
    entryLeafHash(entryHash),
    r.leaf_index,
    r.inclusion.tree_size,
    proof,
    cp.checkpoint.root,
  );
}

/** Fetches the complete receipt a pending one names, and checks it is the same entry's. */
async function complete(pending: ReceiptJson): Promise<ReceiptJson> {
  expect(pending).toMatchObject({ receipt_version: 1, inclusion: null, leaf_index: pending.sequence_number });
  expect(pending.fetch).toBe(`/sessions/${pending.session_id}/receipts/${pending.call_id}`);
  const r = await rest(gw.url, 'alice-token', 'GET', pending.fetch as string);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const full = r.body as ReceiptJson;
  expect(full).toMatchObject({
    chain_id: pending.chain_id,
    entry_hash: pending.entry_hash,
    leaf_index: pending.leaf_index,
    fetch: null,
  });
  return full;
}

describe('receipts', () => {
  it('every data-carrying answer and refusal carries a receipt that verifies against a signed checkpoint', async () => {
    const sid = await openSession();
    const inSession = { _cmcp: { session_id: sid } };
    const answers = {
      completed: await mcp('tools/call', { name: 'counter.record', arguments: { a: 1 }, ...inSession }),
      toolError: await mcp('tools/call', { name: 'counter.fail', arguments: {}, ...inSession }),
      unknownTool: await mcp('tools/call', { name: 'counter.nope', arguments: {}, ...inSession }),
      read: await mcp('resources/read', { uri: 'test://v/0', ...inSession }),
      readRefused: await mcp('resources/read', { uri: 'test://nowhere/0', ...inSession }),
      prompt: await mcp('prompts/get', { name: 'v.v-prompt-0', ...inSession }),
      completion: await mcp('completion/complete', {
        ref: { type: 'ref/resource', uri: 'test://v/{id}' },
        argument: { name: 'id', value: '1' },
        ...inSession,
      }),
    };
    expect(answers.unknownTool.error).toBeDefined();
    expect(answers.readRefused.error).toBeDefined();
    const entries = gw.chain.entries(sid);
    for (const [kind, answer] of Object.entries(answers)) {
      const pending = evidenceOf(answer);
      expect(pending.chain_id, kind).toBe(sid);
      expect(entries[pending.leaf_index]?.entry_hash, kind).toBe(pending.entry_hash);
      const full = await complete(pending);
      expect(receiptVerifies(full), kind).toBe(true);
    }
  });

  it('a tampered leaf, a wrong index, another root, another session and another key do not verify', async () => {
    const [a, b] = [await openSession(), await openSession()];
    const call = async (sid: string) =>
      complete(
        evidenceOf(
          await mcp('tools/call', { name: 'counter.record', arguments: {}, _cmcp: { session_id: sid } }),
        ),
      );
    const ra = await call(a);
    await call(a);
    const rb = await call(b);
    expect(receiptVerifies(ra)).toBe(true);
    expect(receiptVerifies(ra, gw.key.jwk, 'ff'.repeat(32))).toBe(false);
    expect(receiptVerifies({ ...ra, leaf_index: ra.leaf_index - 1 })).toBe(false);
    const inc = ra.inclusion as NonNullable<ReceiptJson['inclusion']>;
    expect(
      receiptVerifies({ ...ra, inclusion: { ...inc, checkpoint: rb.inclusion?.checkpoint as string } }),
    ).toBe(false);
    expect(
      receiptVerifies({ ...rb, inclusion: { ...inc, checkpoint: rb.inclusion?.checkpoint as string } }),
    ).toBe(false);
    const other = ed25519PublicJwk(generateKeyPairSync('ed25519').privateKey);
    expect(receiptVerifies(ra, other)).toBe(false);
  });

  it('200 concurrent calls each verify their own receipt, signed in far fewer checkpoints', async () => {
    const sid = await openSession();
    const before = gw.checkpoints.signatures;
    const receipts = await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const answer = await mcp('tools/call', {
          name: 'counter.record',
          arguments: { i },
          _cmcp: { session_id: sid },
        });
        return complete(evidenceOf(answer));
      }),
    );
    for (const r of receipts) expect(receiptVerifies(r)).toBe(true);
    expect(new Set(receipts.map((r) => r.leaf_index)).size).toBe(200);
    const signed = gw.checkpoints.signatures - before;
    expect(signed).toBeGreaterThan(0);
    expect(signed).toBeLessThan(100);
    // Every checkpoint of the session extends the one before it.
    const sizes = [...new Set(receipts.map((r) => r.inclusion?.tree_size as number))].sort((x, y) => x - y);
    const roots = new Map(
      receipts.map((r) => [
        r.inclusion?.tree_size as number,
        verifyChainCheckpoint(r.inclusion?.checkpoint as string, [gw.key.jwk])?.checkpoint.root as Buffer,
      ]),
    );
    for (let i = 1; i < sizes.length; i++) {
      const [from, to] = [sizes[i - 1] as number, sizes[i] as number];
      const c = await rest(
        gw.url,
        'alice-token',
        'GET',
        `/sessions/${sid}/consistency?from=${from}&to=${to}`,
      );
      expect(c.status, JSON.stringify(c.body)).toBe(200);
      const proof = (c.body.consistency_proof as string[]).map((h) => Buffer.from(h, 'hex'));
      expect(verifyConsistency(from, to, proof, roots.get(from) as Buffer, roots.get(to) as Buffer)).toBe(
        true,
      );
    }
  });

  it("another agent's or an unknown call's receipt is an unknown session", async () => {
    const sid = await openSession();
    const pending = evidenceOf(
      await mcp('tools/call', { name: 'counter.record', arguments: {}, _cmcp: { session_id: sid } }),
    );
    const theirs = await rest(gw.url, 'bob-token', 'GET', pending.fetch as string);
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.error_code).toBe('UNKNOWN_SESSION');
    const unknown = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/receipts/no-such-call`);
    expect(unknown.status).toBe(404);
    const tooFar = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/consistency?from=0&to=99999`);
    expect(tooFar.status).toBe(400);
  });
});
