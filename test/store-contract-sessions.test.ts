/**
 * The sessions' side of the storage contract (store/port.ts SessionStore), the same cases
 * against both engines (test/harness/store-engines.ts): a session's genesis and binding, the
 * default session found again, a close with its claim (issued by claim/issuer.ts, as the session
 * service issues it) and the claim chain, the stored claim text read back as the same bytes, a
 * close of a closed session, and the calls a session counts.
 */
import { generateKeyPairSync } from 'node:crypto';
import { verifyBundle } from '@cmcp/verify';
import {
  type Claim,
  ed25519PublicJwk,
  jwkThumbprint,
  sha256Hex,
  verifyClaimSignature,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimIssuer } from '../src/claim/issuer.js';
import { claimInputsFor } from '../src/session/claim-binding.js';
import type { GatewayKey, SessionRow } from '../src/session/types.js';
import type { SessionStore } from '../src/store/port.js';
import { contractEngines, type Engine, type Replica } from './harness/store-engines.js';

const { withPostgres, engines } = contractEngines('contract_sessions');

const FACTS = {
  gatewayMeasurement: null,
  policyBundleHash: null,
  catalogHash: null,
  enforcementMode: 'enforcing',
};

function newKey(): GatewayKey {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  return { privateKey, jwk, thumbprint: jwkThumbprint(jwk) };
}

let n = 0;

/** Opens a session through `store` with its (failed) binding recorded, as the session service does. */
async function open(store: SessionStore, key: GatewayKey, isDefault = false): Promise<string> {
  const sessionId = `session-${++n}`;
  await store.openSession({
    sessionId,
    agentId: 'agent-1',
    isDefault,
    provider: 'software',
    keyThumbprint: key.thumbprint.toString('base64url'),
  });
  await store.recordBinding(
    sessionId,
    {
      entry_type: 'attestation_binding_failed',
      session_id: sessionId,
      agent_id: 'agent-1',
      detail: { provider: 'software', reason: 'TEST' },
    },
    {},
  );
  return sessionId;
}

/** Closes through `store` with the claim the session service issues under `key`. */
function close(store: SessionStore, key: GatewayKey, sessionId: string) {
  const inputs = (row: SessionRow) => claimInputsFor(row, sessionId, row.agent_id, key, FACTS, 'software');
  return store.closeSession(sessionId, 'requested', claimIssuer(inputs, store.fence));
}

/** A refusal recorded as a call's terminal entry in `sessionId` (counted against it). */
function refusal(r: Replica, sessionId: string) {
  return r.writes.write({
    kind: 'refusal',
    sessionId,
    entry: {
      entry_type: 'tool_call',
      agent_id: 'agent-1',
      session_id: sessionId,
      tool_name: 'echo',
      disposition: 'refused',
      error_code: 'POLICY_DENY',
    },
  });
}

describe.each(engines)('the sessions of the storage contract on %s', (name, make) => {
  const skip = name === 'postgres' && !withPostgres;
  let engine: Engine;
  const key = newKey();
  const replica = () => engine.replicas[0] as Replica;
  beforeAll(async () => {
    if (!skip) engine = await make();
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  it.skipIf(skip)(
    'a session opens with its genesis entry and open row; its binding is recorded',
    async () => {
      const store = replica().sessions;
      expect(await store.newestClaimSequence()).toBeNull();
      const sid = await open(store, key);
      const row = await store.session(sid);
      expect(row).toMatchObject({
        session_id: sid,
        agent_id: 'agent-1',
        is_default: 0,
        status: 'open',
        call_count: 0,
        owner: store.fence.replicaId,
        key_thumbprint: key.thumbprint.toString('base64url'),
        closed_at: null,
      });
      expect(row?.binding_json).toBe('{}');
      const bundle = await engine.bundle(sid, sid);
      expect(bundle.entries.map((e) => JSON.parse(e.canonical).entry_type)).toEqual([
        'session_open',
        'attestation_binding_failed',
      ]);
      expect(row?.chain_root).toBe(bundle.entries[0]?.entry_hash);
      expect(verifyBundle(bundle).checks.filter((c) => c.status === 'fail')).toEqual([]);
      expect(await store.claim(sid)).toBeUndefined();
      expect(await store.claimCanonical(sid)).toBeUndefined();
    },
  );

  it.skipIf(skip)("the agent's default session is found again: the newest open one", async () => {
    const store = replica().sessions;
    const before = await store.openSessionCount('agent-1');
    const older = await open(store, key, true);
    await new Promise((resolve) => setTimeout(resolve, 5)); // created_ms orders them
    const newer = await open(store, key, true);
    await open(store, key, false);
    expect(await store.openDefaultSession('agent-1')).toBe(newer);
    expect(await store.openSessionCount('agent-1')).toBe(before + 3);
    const listed = (await store.openSessions('agent-1')).map((r) => r.session_id);
    expect(listed.indexOf(older)).toBeLessThan(listed.indexOf(newer));
    await close(store, key, newer);
    expect(await store.openDefaultSession('agent-1')).toBe(older);
    expect(await store.openSessions('agent-2')).toEqual([]);
  });

  it.skipIf(skip)(
    'a close writes session_close, the status and a claim that verifies; its text reads back as the same bytes; claims chain',
    async () => {
      const store = replica().sessions;
      const first = await open(store, key);
      const a = await close(store, key, first);
      const sid = await open(store, key);
      await refusal(replica(), sid);
      const b = await close(store, key, sid);
      expect(b.issued).toBe(true);
      expect(verifyClaimSignature(b.claim)).toBe(true);
      expect(b.claim.claim_sequence).toBe(a.claim.claim_sequence + 1);
      expect(b.claim.prev_claim_hash).toBe(sha256Hex(a.canonical));
      expect(await store.newestClaimSequence()).toBe(b.claim.claim_sequence);
      const bundle = await engine.bundle(sid, sid);
      const types = bundle.entries.map((e) => JSON.parse(e.canonical).entry_type);
      expect(types).toEqual(['session_open', 'attestation_binding_failed', 'tool_call', 'session_close']);
      expect(b.claim.audit_chain).toMatchObject({
        chain_id: sid,
        length: 4,
        tip: bundle.entries[3]?.entry_hash,
      });
      expect(b.claim.counters).toEqual({ tool_calls: 1, allowed: 0, refused: 1, faulted: 0 });
      expect(b.claim.evidence.status).toBe('absent');
      // The stored text is the issued text, byte for byte, parsed and as stored.
      const stored = await store.claim(sid);
      expect(stored?.canonical.equals(b.canonical)).toBe(true);
      expect(stored?.claim).toEqual(JSON.parse(b.canonical.toString('utf8')) as Claim);
      expect((await store.claimCanonical(sid))?.equals(b.canonical)).toBe(true);
      const row = await store.session(sid);
      expect(row?.status).toBe('closed');
      expect(row?.closed_at).not.toBeNull();
    },
  );

  it.skipIf(skip)('closing a closed session answers its stored claim and writes nothing', async () => {
    const store = replica().sessions;
    const sid = await open(store, key);
    const first = await close(store, key, sid);
    const again = await close(store, key, sid);
    expect(again.issued).toBe(false);
    expect(again.canonical.equals(first.canonical)).toBe(true);
    expect((await engine.bundle(sid, sid)).entries).toHaveLength(3);
    await expect(close(store, key, 'no-such-session')).rejects.toThrow(/unknown/);
  });

  it.skipIf(skip)(
    "a session counts its calls, whichever replica records them; the close's entry and claim say how many",
    async () => {
      const store = replica().sessions;
      const sid = await open(store, key);
      await Promise.all(engine.replicas.map((r) => refusal(r, sid)));
      await refusal(replica(), sid);
      expect((await store.session(sid))?.call_count).toBe(4);
      expect(await engine.callCount(sid)).toBe(4);
      const closed = await close(store, key, sid);
      expect(closed.claim.counters.tool_calls).toBe(4);
      const entries = (await engine.bundle(sid, sid)).entries.map((e) => JSON.parse(e.canonical));
      expect(entries.at(-1)).toMatchObject({
        entry_type: 'session_close',
        detail: { reason: 'requested', calls: 4 },
      });
    },
  );
});
