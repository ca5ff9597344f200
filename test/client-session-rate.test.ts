/**
 * The rate of client sessions an agent opens (docs/operations.md#limits-and-timeouts): each
 * successful `initialize` writes a `client_session_open` entry, so beyond
 * `limits.agent_client_sessions_per_min` an `initialize` is refused
 * AGENT_CLIENT_SESSIONS_RATE_LIMITED (429, its JSON-RPC id, Retry-After) and recorded in the
 * aggregated refusal record instead — in dev mode, where every unauthenticated client is `dev`,
 * too. A real dev-mode gateway and real SQLite.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/index.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const PER_MIN = 3;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  cfg = await writeConfig({ dev_mode: true, extra: { limits: { agent_client_sessions_per_min: PER_MIN } } });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  if (cfg) cleanup(cfg.dir);
});

const initialize = (id: number, token: string | null) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'flood', version: '1' } },
  });

const entries = (type: string, agent: string) =>
  gw.chain.entries('gateway').filter((e) => e.entry_type === type && e.agent_id === agent);

describe('client sessions opened per agent per minute', () => {
  it('beyond the limit, initialize is refused and recorded, and no client_session_open is written', async () => {
    const answers = [];
    for (let i = 1; i <= PER_MIN + 4; i++) answers.push(await initialize(i, null));
    const opened = answers.slice(0, PER_MIN);
    for (const a of opened) {
      expect(a.status).toBe(200);
      expect(a.headers.get('mcp-session-id')).toBeTruthy();
    }
    for (const [i, a] of answers.slice(PER_MIN).entries()) {
      expect(a.status).toBe(429);
      expect(a.body.id).toBe(PER_MIN + 1 + i);
      expect(a.body.error.data.error_code).toBe('AGENT_CLIENT_SESSIONS_RATE_LIMITED');
      expect(a.headers.get('mcp-session-id')).toBeNull();
      expect(Number(a.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    await new Promise((r) => setTimeout(r, 100));
    expect(entries('client_session_open', 'dev')).toHaveLength(PER_MIN);
    // Four refusals, one entry in the open window (the rest are counted when it closes).
    const refused = entries('request_refused', 'dev').filter(
      (e) => e.error_code === 'AGENT_CLIENT_SESSIONS_RATE_LIMITED',
    );
    expect(refused).toHaveLength(1);
    expect(refused[0]?.detail).toMatchObject({ route: 'POST /mcp', method: 'initialize', count: 1 });
    // Another agent has its own budget.
    expect((await initialize(100, 'alice-token')).status).toBe(200);
    expect(entries('client_session_open', 'alice')).toHaveLength(1);
  });

  it('the setting has a safe default and refuses nonsense', () => {
    const base = {
      database: '/tmp/x.db',
      attestation: { provider: 'tpm', tcti: 'swtpm:host=127.0.0.1,port=1' },
      agents: [{ agent_id: 'a', token_sha256: 'a'.repeat(64) }],
    };
    expect(parseConfig(base).limits.agent_client_sessions_per_min).toBe(60);
    expect(() => parseConfig({ ...base, limits: { agent_client_sessions_per_min: 0 } })).toThrow(
      /agent_client_sessions_per_min/,
    );
  });
});
