/**
 * Issue 10 item 1, 2025-11-25 tasks: a task-augmented `tools/call` passed through to a real SDK
 * upstream that offers tasks (test/fixtures/tasks-server.ts), `tasks/get`, `tasks/result`,
 * `tasks/list` and `tasks/cancel` routed to the upstream that created the task, the `tasks`
 * capability advertised only when an upstream offers it, and `tasks/result` evidenced with a
 * terminal `task_result` entry (digests only). The SDK Client in front, over HTTP.
 */
import { verifyBundle, verifyClaim } from '@cmcp/verify';
import type { Claim } from '@cmcp/verify/formats';
import { jcsDigest } from '@cmcp/verify/formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type RelayServer, startRelayServer } from './fixtures/relay-server.js';
import { startTasksServer, type TasksServer } from './fixtures/tasks-server.js';
import { rest, startInProcess, writeConfig } from './harness/gateway.js';

async function sdkClient(url: string, token = 'alice-token'): Promise<Client> {
  const client = new Client({ name: 'tasks-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  return client;
}

function taskCall(client: Client, name: string, args: Record<string, unknown>) {
  return client.request(
    { method: 'tools/call', params: { name, arguments: args, task: { ttl: 60_000 } } },
    CreateTaskResultSchema,
  );
}

describe('tasks through the gateway', () => {
  let up: TasksServer;
  let plain: RelayServer;
  let gw: Gateway;
  let client: Client;
  /** The session the tasks/result entry went to (alice's default session). */
  let sessionId = '';

  beforeAll(async () => {
    up = await startTasksServer('t');
    plain = await startRelayServer({ tag: 'p' });
    const cfg = await writeConfig({
      upstreams: [
        { name: 't', transport: 'http', url: up.url },
        { name: 'p', transport: 'http', url: plain.url },
      ],
    });
    gw = await startInProcess(cfg);
    client = await sdkClient(gw.url);
  });
  afterAll(async () => {
    await client?.close();
    await gw?.close();
    await up?.close();
    await plain?.close();
  });

  it('advertises tasks as the upstream offers them', () => {
    expect(client.getServerCapabilities()?.tasks).toEqual({
      list: {},
      cancel: {},
      requests: { tools: { call: {} } },
    });
  });

  it('passes a task-augmented tools/call through and relays get, result and list to its upstream', async () => {
    const created = await taskCall(client, 't.t-work', { input: 'ore', ms: 150 });
    const taskId = created.task.taskId;
    expect(up.store.getAllTasks().map((t) => t.taskId)).toContain(taskId);
    expect(created.task.status).toBe('working');
    const status = await client.experimental.tasks.getTask(taskId);
    expect(status.taskId).toBe(taskId);
    expect(['working', 'completed']).toContain(status.status);
    // tasks/result waits for the task, and carries the tool's result with its evidence.
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    expect(result.content).toEqual([{ type: 'text', text: 't worked on ore' }]);
    const evidence = result._meta?.['dev.cmcp/evidence'] as { chain_id: string; sequence_number: number };
    expect(evidence).toBeDefined();
    sessionId = evidence.chain_id;
    expect((await client.experimental.tasks.getTask(taskId)).status).toBe('completed');
    const listed = await client.experimental.tasks.listTasks();
    expect(listed.tasks.map((t) => t.taskId)).toContain(taskId);
    // The terminal entry: its own type, the task id as target, digests only.
    const entry = gw.chain
      .entries(evidence.chain_id)
      .find((e) => e.sequence_number === evidence.sequence_number);
    expect(entry).toMatchObject({
      entry_type: 'task_result',
      server_identity: 't',
      disposition: 'completed',
      error_code: null,
      policy_decision: 'inherited',
      request_payload_hash: jcsDigest({ taskId }),
      detail: { method: 'tasks/result', target: taskId },
    });
    expect(entry?.response_payload_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(JSON.stringify(entry)).not.toContain('worked on');
    // The session's bundle verifies, the task_result entry well formed.
    const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${evidence.chain_id}/audit`)).body;
    const v = verifyBundle(bundle);
    expect(v.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(v.entry_counts.task_result).toBe(1);
  });

  it('cancels a task at its upstream', async () => {
    const created = await taskCall(client, 't.t-hold', {});
    const taskId = created.task.taskId;
    const cancelled = await client.experimental.tasks.cancelTask(taskId);
    expect(cancelled.status).toBe('cancelled');
    expect((await client.experimental.tasks.getTask(taskId)).status).toBe('cancelled');
    expect(up.store.getAllTasks().find((t) => t.taskId === taskId)?.status).toBe('cancelled');
  });

  it("refuses an unknown task id, and another agent's, with -32602; records a refused result", async () => {
    const created = await taskCall(client, 't.t-work', { input: 'mine', ms: 0 });
    await expect(client.experimental.tasks.getTask('no-such-task')).rejects.toThrow(
      /created through the gateway/,
    );
    const bob = await sdkClient(gw.url, 'bob-token');
    try {
      await expect(bob.experimental.tasks.getTask(created.task.taskId)).rejects.toMatchObject({
        code: -32602,
      });
      await expect(bob.experimental.tasks.getTaskResult(created.task.taskId)).rejects.toMatchObject({
        code: -32602,
      });
      expect((await bob.experimental.tasks.listTasks()).tasks).toEqual([]);
    } finally {
      await bob.close();
    }
    const refused = gw.db
      .prepare<[], { n: number }>(
        "SELECT count(*) AS n FROM audit_entries WHERE entry_type = 'task_result' AND agent_id = 'bob'",
      )
      .get();
    expect(refused?.n).toBe(1);
  });

  it("counts the session's task_result entries in its claim, and the claim verifies", async () => {
    const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${sessionId}/close`)).body as Claim;
    const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sessionId}/audit`)).body;
    expect(claim.entry_counts?.task_result).toBe(1);
    expect(claim.entry_counts?.tool_call).toBe(3);
    const r = verifyClaim(claim, { bundle });
    expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(r.checks.find((c) => c.id === 'audit.entry_counts')?.status).toBe('pass');
  });
});

describe('no upstream offers tasks', () => {
  it('does not advertise tasks; tasks/list is unsupported, tasks/get has no task to route', async () => {
    const plain = await startRelayServer({ tag: 'q' });
    const gw = await startInProcess(
      await writeConfig({ upstreams: [{ name: 'q', transport: 'http', url: plain.url }] }),
    );
    const client = await sdkClient(gw.url);
    try {
      expect(client.getServerCapabilities()?.tasks).toBeUndefined();
      await expect(
        client.request({ method: 'tasks/list', params: {} }, CreateTaskResultSchema.partial()),
      ).rejects.toMatchObject({ data: { error_code: 'UPSTREAM_METHOD_UNSUPPORTED' } });
      await expect(
        client.request({ method: 'tasks/get', params: { taskId: 'x' } }, CreateTaskResultSchema.partial()),
      ).rejects.toMatchObject({ code: -32602 });
    } finally {
      await client.close();
      await gw.close();
      await plain.close();
    }
  });
});
