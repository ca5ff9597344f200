/**
 * The answers a graceful shutdown gives calls that outlived the drain time
 * (docs/spec/call-path.md#shutdown): CALL_INTERRUPTED with its JSON-RPC id, `data.disposition`
 * and `data.evidence` naming the outcome_unknown entry that recorded the call — as JSON and on
 * an SSE stream — and the upstream's late answer (or failure) after that is sent nowhere and
 * logged as no error ("reply already sent"). A real in-process gateway, a real Streamable HTTP
 * upstream (counting-server), real SQLite.
 */
import { Writable } from 'node:stream';
import Database from 'better-sqlite3';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, rpc, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let cfg: TestConfig;
let gw: Gateway;
/** Every log line of the gateway at level warn and above. */
const lines: { level: number; msg: string; err?: unknown }[] = [];

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({ upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: 30_000 }] });
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      done();
    },
  });
  gw = await startGateway(loadConfig(cfg.file), pino({ level: 'warn' }, sink));
}, 60_000);

afterAll(async () => {
  up?.release();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

/** The `data: …` JSON-RPC message of an SSE response body. */
function sseMessage(text: string) {
  const data = text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => JSON.parse(l.slice(6)))
    .find((m) => m.id !== undefined);
  return data;
}

describe('answers at shutdown', () => {
  it('CALL_INTERRUPTED names the entry that recorded it; the late upstream answer is sent nowhere', async () => {
    const s = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body;
    const marker = `m-${Math.random().toString(36).slice(2)}`;
    const params = (x: number) => ({
      name: 'c.hold',
      arguments: { ms: 20_000, marker, x },
      _cmcp: { session_id: s.session_id, ...(x === 2 ? { execution_id: `${marker}-x` } : {}) },
    });
    // A client that accepts JSON only: no stream, the answer is the HTTP response.
    const json = rpc(
      gw.url,
      'alice-token',
      { jsonrpc: '2.0', id: 'j-1', method: 'tools/call', params: params(1) },
      { accept: 'application/json' },
    );
    // An SSE-only client: the stream is open before the result (docs/spec/mcp.md#inbound).
    const sse = rpc(
      gw.url,
      'alice-token',
      { jsonrpc: '2.0', id: 7, method: 'tools/call', params: params(2) },
      { accept: 'text/event-stream' },
    );
    for (let i = 0; i < 100 && up.invocations.filter((v) => v.args.marker === marker).length < 2; i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(2);

    const report = await gw.shutdown(300);
    expect(report.drained).toBe(false);
    expect(report.recovered.attempts).toBe(2);
    const answers = [(await json).body, sseMessage((await sse).text)];
    // The upstream answers now: too late, nothing more may be sent or logged as a fault.
    up.release();
    await new Promise((r) => setTimeout(r, 500));

    const db = new Database(cfg.dbPath, { readonly: true });
    const rows = db
      .prepare<[], { canonical: string; entry_hash: string }>(
        "SELECT canonical, entry_hash FROM audit_entries WHERE entry_type = 'tool_call' AND json_extract(canonical, '$.error_code') = 'CALL_INTERRUPTED'",
      )
      .all()
      .map((r) => ({ ...JSON.parse(r.canonical), entry_hash: r.entry_hash }));
    db.close();
    expect(rows).toHaveLength(2);
    for (const [a, id, x] of [
      [answers[0], 'j-1', 1],
      [answers[1], 7, 2],
    ] as const) {
      expect(a.id).toBe(id);
      expect(a.error.data).toMatchObject({ error_code: 'CALL_INTERRUPTED', disposition: 'outcome_unknown' });
      const e = rows.find((r) => r.call_id === a.error.data.call_id);
      expect(e, `the entry of call ${x}`).toBeDefined();
      expect(a.error.data.evidence).toEqual({
        call_id: e.call_id,
        session_id: s.session_id,
        chain_id: s.session_id,
        entry_hash: e.entry_hash,
        sequence_number: e.sequence_number,
      });
    }
    expect(answers[1].error.data).toMatchObject({
      execution_id: `${marker}-x`,
      execution_state: 'outcome_unknown',
    });
    expect(new Set(answers.map((a) => a.error.data.call_id)).size).toBe(2);
    const faults = lines.filter((l) => l.level >= 50 || /already sent/i.test(JSON.stringify(l)));
    expect(faults).toEqual([]);
  }, 60_000);
});
