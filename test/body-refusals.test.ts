/**
 * Bodies refused before a handler runs (docs/spec/mcp.md#inbound, C-MCP-4) — malformed JSON,
 * invalid UTF-8, an empty JSON body, 413 and 415, on /mcp, the session routes and the operator
 * routes — are answered with a stable code and a message that says what is wrong, are in the
 * aggregated refusal record (docs/spec/audit-entries.md#chains) and are counted in
 * cmcp_refusals_total. A real gateway, real SQLite; many refusals of one agent stay one entry
 * per 10-second window.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const OP = 'body-refusals-operator';
const LIMIT = 4096;

let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  cfg = await writeConfig({
    agents: ['alice', 'bob', 'carol'].map((a) => ({ agent_id: a, token: `${a}-token` })),
    operators: [{ operator_id: 'root', token: OP }],
    extra: { limits: { max_request_bytes: LIMIT } },
  });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  if (cfg) cleanup(cfg.dir);
});

/** POSTs raw bytes with the given token and Content-Type. */
async function post(path: string, token: string, body: string | Uint8Array, type = 'application/json') {
  const r = await fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': type,
      accept: 'application/json, text/event-stream',
    },
    body,
  });
  const text = await r.text();
  return { status: r.status, body: JSON.parse(text) };
}

/** The `request_refused` entries of the gateway chain with one code and agent. */
function refused(code: string, agent: string | null) {
  return gw.chain
    .entries('gateway')
    .filter((e) => e.entry_type === 'request_refused' && e.error_code === code && e.agent_id === agent);
}

async function refusalsMetric(code: string): Promise<number> {
  const text = await (
    await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${OP}` } })
  ).text();
  const line = text.split('\n').find((l) => l.startsWith(`cmcp_refusals_total{code="${code}"}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/** Lets the refusal's append (not awaited by the request) reach the chain. */
const settle = () => new Promise((r) => setTimeout(r, 100));

describe('bodies refused before a handler are recorded', () => {
  it('malformed JSON on /mcp: PARSE_ERROR, recorded with route and reason, counted', async () => {
    const before = await refusalsMetric('PARSE_ERROR');
    const r = await post('/mcp', 'alice-token', '{"jsonrpc":"2.0",');
    expect(r.status).toBe(400);
    expect(r.body.error.data.error_code).toBe('PARSE_ERROR');
    expect(r.body.error.message).toBe('the body is not valid JSON');
    await settle();
    const [e] = refused('PARSE_ERROR', 'alice');
    expect(e?.detail).toMatchObject({ route: 'POST /mcp', reason: 'not_json', count: 1 });
    expect((await refusalsMetric('PARSE_ERROR')) - before).toBe(1);
  });

  it('invalid UTF-8 and an empty body: PARSE_ERROR with their own reasons', async () => {
    const bad = await post('/mcp', 'bob-token', new Uint8Array([0x7b, 0xff, 0x7d]));
    expect(bad.body.error.message).toBe('the body is not valid UTF-8');
    const empty = await post('/mcp', 'carol-token', '');
    expect(empty.status).toBe(400);
    expect(empty.body.error.message).toBe('the body is empty but Content-Type is application/json');
    await settle();
    expect(refused('PARSE_ERROR', 'bob')[0]?.detail?.reason).toBe('not_utf8');
    expect(refused('PARSE_ERROR', 'carol')[0]?.detail?.reason).toBe('empty');
  });

  it('415 and 413 on /mcp and POST /sessions are recorded under their codes', async () => {
    const m415 = await refusalsMetric('UNSUPPORTED_MEDIA_TYPE');
    const m413 = await refusalsMetric('PAYLOAD_TOO_LARGE');
    const t = await post('/mcp', 'alice-token', '{}', 'text/plain');
    expect(t.status).toBe(415);
    expect(t.body.error.data.error_code).toBe('UNSUPPORTED_MEDIA_TYPE');
    const big = JSON.stringify({ challenge: 'x'.repeat(LIMIT) });
    const s = await post('/sessions', 'alice-token', big);
    expect(s.status).toBe(413);
    expect(s.body.error.error_code).toBe('PAYLOAD_TOO_LARGE');
    await settle();
    expect(refused('UNSUPPORTED_MEDIA_TYPE', 'alice')[0]?.detail).toMatchObject({
      route: 'POST /mcp',
      reason: 'media_type',
    });
    expect(refused('PAYLOAD_TOO_LARGE', 'alice')[0]?.detail).toMatchObject({
      route: 'POST /sessions',
      reason: 'too_large',
    });
    expect((await refusalsMetric('UNSUPPORTED_MEDIA_TYPE')) - m415).toBe(1);
    expect((await refusalsMetric('PAYLOAD_TOO_LARGE')) - m413).toBe(1);
  });

  it('a non-JSON body on POST /sessions says what is wrong, and is recorded', async () => {
    const r = await post('/sessions', 'bob-token', 'challenge=abc');
    expect(r.status).toBe(400);
    expect(r.body.error).toEqual({ error_code: 'INVALID_REQUEST', message: 'the body is not valid JSON' });
    await settle();
    expect(refused('INVALID_REQUEST', 'bob')[0]?.detail).toMatchObject({
      route: 'POST /sessions',
      reason: 'not_json',
    });
  });

  it('an operator route names the operator; the agent is null', async () => {
    const r = await post('/operator/agents/bob/block', OP, '{"reason":');
    expect(r.status).toBe(400);
    await settle();
    expect(refused('INVALID_REQUEST', null).at(-1)?.detail).toMatchObject({
      route: 'POST /operator/agents/:agent_id/block',
      reason: 'not_json',
      operator_id: 'root',
    });
  });

  it('many malformed bodies from one agent are one entry in the window, every one counted', async () => {
    const code = 'UNSUPPORTED_MEDIA_TYPE';
    const entries = refused(code, 'carol').length;
    const before = await refusalsMetric(code);
    for (let i = 0; i < 40; i++)
      expect((await post('/mcp', 'carol-token', 'x', 'text/plain')).status).toBe(415);
    await settle();
    expect(refused(code, 'carol').length - entries).toBe(1);
    expect((await refusalsMetric(code)) - before).toBe(40);
  });
});
