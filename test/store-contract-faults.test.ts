/**
 * The storage contract under the persistence fault seam (store/faults.ts,
 * CMCP_FAULT_INJECT=terminal_commit, the one the crash test uses): on both engines the terminal
 * command throws after its entry, registry transition, call count and attempt end, inside its
 * transaction, and nothing of it is written. Its own file: the seam is read once per process.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';
import { type Engine, postgresEngine, sqliteEngine } from './harness/store-engines.js';

vi.hoisted(() => {
  process.env.CMCP_FAULT_INJECT = 'terminal_commit';
});

const withPostgres = hasPostgres();
let server: PostgresInstance | null = null;
beforeAll(async () => {
  if (withPostgres) server = await startPostgres();
}, 60_000);
afterAll(async () => {
  await server?.stop();
  delete process.env.CMCP_FAULT_INJECT;
});

const engines: [string, () => Promise<Engine>][] = [
  ['sqlite', async () => sqliteEngine()],
  ['postgres', () => postgresEngine(server as PostgresInstance, 'faults')],
];

describe.each(engines)('an injected fault in the terminal transaction on %s', (name, make) => {
  it.skipIf(name === 'postgres' && !withPostgres)(
    'rolls back the entry, the registry transition, the count and the attempt end',
    async () => {
      const engine = await make();
      try {
        await engine.addSession('s-fault', 'agent-1');
        const attempt = {
          callId: 'call-fault',
          method: 'tools/call',
          upstream: 'upstream-a',
          agentId: 'agent-1',
          sessionId: 's-fault',
          executionId: 'x-fault',
          toolName: 'echo',
          requestPayloadHash: null,
          workflowId: null,
        };
        const admitted = await engine.replicas[0]?.writes.write({
          kind: 'admission',
          admission: {
            agentId: 'agent-1',
            executionId: 'x-fault',
            binding: `sha256:${'ab'.repeat(32)}`,
            callId: 'call-fault',
            sessionId: 's-fault',
            toolName: 'echo',
          },
          attempt,
          raiseSensitivity: null,
          refusalEntry: { entry_type: 'tool_call' },
        });
        expect(admitted).toEqual({ kind: 'admitted' });
        await expect(
          engine.replicas[1]?.writes.write({
            kind: 'terminal',
            sessionId: 's-fault',
            entry: {
              entry_type: 'tool_call',
              call_id: 'call-fault',
              session_id: 's-fault',
              execution_id: 'x-fault',
            },
            disposition: 'completed',
            execution: { agentId: 'agent-1', executionId: 'x-fault', callId: 'call-fault' },
          }),
        ).rejects.toMatchObject({ code: 'INJECTED_FAULT' });
        expect((await engine.bundle('s-fault', 's-fault')).entries).toEqual([]);
        expect(await engine.execution('agent-1', 'x-fault')).toMatchObject({
          state: 'in_flight',
          terminal_entry_hash: null,
        });
        expect(await engine.callCount('s-fault')).toBe(0);
        expect(await engine.openAttempts()).toEqual(['call-fault']);
      } finally {
        await engine.close();
      }
    },
    60_000,
  );
});
