/**
 * One replica as its own OS process (test/replica-processes.test.ts), from the built store
 * (dist/): acquires its lease (argv: database URL, replica id, ttl ms, renewal ms) with the
 * gateway's lease gate, opens a session, records a call's attempt as the call path does before
 * invoking its upstream, prints `attempted <session_id> <call_id> <lease_token>`, then waits —
 * "at the upstream" — for a line on stdin, and writes the call's terminal, printing
 * `terminal ok` or `terminal <error code>` and `gate live|lost`. Killed or stopped by the test.
 */
import pino from 'pino';
import { LeaseGate, startReplicaLease } from '../../dist/src/gateway/lifecycle/lease-gate.js';
import { PostgresSessionStore } from '../../dist/src/store/postgres/session-store.js';
import { openReplicaPool } from '../../dist/src/store/postgres/transaction.js';
import { PostgresWriteStore } from '../../dist/src/store/postgres/write-store.js';

const [url, replicaId, ttl, renew] = process.argv.slice(2);
const replicas = { lease_ttl_ms: Number(ttl), renew_every_ms: Number(renew) };
const pool = openReplicaPool(url, { leaseTtlMs: replicas.lease_ttl_ms, max: 2 });
const gate = new LeaseGate();
const log = pino({ level: 'silent' });
const lease = await startReplicaLease(pool, {
  instanceId: replicaId,
  replicas,
  keyThumbprint: replicaId,
  gate,
  log,
});
const sessionId = `${replicaId}-session`;
await new PostgresSessionStore(pool, lease.fence).openSession({
  sessionId,
  agentId: 'agent-1',
  isDefault: false,
  provider: 'software',
  keyThumbprint: replicaId,
});
const writes = new PostgresWriteStore(pool, lease.fence);
const attempt = {
  callId: `${replicaId}-call`,
  method: 'tools/call',
  upstream: 'upstream-a',
  agentId: 'agent-1',
  sessionId,
  executionId: `${replicaId}-x`,
  toolName: 'echo',
  requestPayloadHash: null,
  workflowId: null,
};
await writes.write({
  kind: 'admission',
  admission: {
    agentId: 'agent-1',
    executionId: attempt.executionId,
    binding: 'sha256:binding',
    callId: attempt.callId,
    sessionId,
    toolName: 'echo',
  },
  attempt,
  raiseSensitivity: null,
  refusalEntry: { entry_type: 'tool_call', call_id: attempt.callId, session_id: sessionId },
});
process.stdout.write(`attempted ${sessionId} ${attempt.callId} ${lease.fence.leaseToken}\n`);
process.stdin.once('data', async () => {
  try {
    await writes.write({
      kind: 'terminal',
      sessionId,
      entry: { entry_type: 'tool_call', call_id: attempt.callId, agent_id: 'agent-1', session_id: sessionId },
      disposition: 'completed',
      execution: { agentId: 'agent-1', executionId: attempt.executionId, callId: attempt.callId },
    });
    process.stdout.write('terminal ok\n');
  } catch (e) {
    process.stdout.write(`terminal ${e.code ?? e.message}\n`);
  }
  // A renewal after the wake finds the lease lost and closes the gate.
  const end = Date.now() + 3 * replicas.renew_every_ms + 1000;
  while (gate.live && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  process.stdout.write(`gate ${gate.live ? 'live' : 'lost'}\n`);
  await lease.stop().catch(() => undefined);
  await pool.end();
  process.exit(0);
});
