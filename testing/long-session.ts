/**
 * A long session's close and export measured from the gateway's side (issue 11 item 7), shared
 * by test/claim-close-paged.test.ts (loose bounds that can fail) and bench/loop-block.ts (the
 * distribution over many runs against the 3 ms goal): a session filled with tool_call entries
 * straight into its chain, a client in another process that closes or exports it, and the
 * longest event-loop stall (testing/stall.ts) while it does.
 */

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { sha256Hex } from '@cmcp/verify/formats';
import { Agent, fetch as undiciFetch } from 'undici';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import type { EntryInput } from '../src/store/entries/next-entry.js';
import { immediate } from '../src/store/sqlite/db.js';
import { startClient } from './client-process.js';
import { measureStall, type Stall, type StallProbe } from './stall.js';

/** Entries a long session holds (the length issue 11 measured at ~1 s of blocking close). */
export const LONG_SESSION_ENTRIES = 10_000;

/** Entries per transaction of {@link longSession}'s fill. */
const FILL_BATCH = 64;

/** The agent and its static token (the config must have them: `{ agent_id, token }`). */
export interface LongSessionAgent {
  agentId: string;
  token: string;
}

/**
 * Opens a session of `agent` and fills its chain with `n` tool_call entries (~0.9 KB each, as
 * a call's terminal entry is), written straight to the chain in transactions of
 * {@link FILL_BATCH} (as group commits write them, so the WAL is left as a serving gateway
 * leaves it, not just checkpointed by one huge commit): the close or the export is what is
 * measured. @returns the session_id.
 * @throws Error when the gateway refuses to open the session.
 */
export async function longSession(gw: Gateway, agent: LongSessionAgent, n: number): Promise<string> {
  const sid = await openLongSession(gw, agent);
  for (let from = 0; from < n; from += FILL_BATCH)
    immediate(gw.db, () => {
      for (let i = from; i < Math.min(n, from + FILL_BATCH); i++)
        gw.chain.append(sid, longSessionEntry(sid, agent.agentId, i));
    });
  return sid;
}

/**
 * `POST /sessions` as `agent` on a connection of its own. @returns the session_id.
 * @throws Error when the gateway refuses to open the session.
 */
export async function openLongSession(gw: { url: string }, agent: LongSessionAgent): Promise<string> {
  // A connection of its own: a pooled keep-alive socket the gateway closed while this process
  // was busy (the last fill, a long verification) could be reused for this request and reset
  // (ECONNRESET, seen in a loaded CI run).
  const own = new Agent({ pipelining: 0 });
  let opened: { session_id?: string };
  let r: Awaited<ReturnType<typeof undiciFetch>>;
  try {
    r = await undiciFetch(`${gw.url}/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${agent.token}`, 'content-type': 'application/json' },
      body: '{}',
      dispatcher: own,
    });
    opened = (await r.json()) as { session_id?: string };
  } finally {
    await own.close();
  }
  if (r.status !== 201 || !opened.session_id) throw new Error(`POST /sessions: ${r.status}`);
  return opened.session_id;
}

/** The `i`th tool_call entry of a long session (~0.9 KB, as a call's terminal entry is). */
export function longSessionEntry(sid: string, agentId: string, i: number): EntryInput {
  return {
    entry_type: 'tool_call',
    session_id: sid,
    agent_id: agentId,
    call_id: `call-${i}`,
    tool_name: i % 7 === 0 ? 'fs.write_file' : 'fs.read_file',
    server_identity: 'fs',
    policy_decision: i % 11 === 0 ? 'deny' : 'allow',
    policy_rule_matched: ['policy0'],
    disposition: i % 11 === 0 ? 'refused' : 'completed',
    error_code: i % 11 === 0 ? 'POLICY_DENY' : null,
    latency_us: 1000 + i,
    request_payload_hash: `sha256:${sha256Hex(`req-${i}`)}`,
    response_payload_hash: `sha256:${sha256Hex(`res-${i}`)}`,
    detail: { note: 'x'.repeat(400) },
  };
}

/** A full garbage collection now (V8's gc(), exposed for this process). */
export function fullGc(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

/** What the close's client saw: the status, the /healthz probes answered meanwhile. */
export interface ClosedRemotely {
  status: number;
  probes: number;
  stall: Stall;
  /** Wall time from the client's start to its exit, milliseconds. */
  ms: number;
}

/**
 * `POST /sessions/{sid}/close` from a client in another process (started beforehand), which
 * probes /healthz throughout and writes the ~1.5 MB answer to `answerFile` after it; the
 * longest stall of this process's loop meanwhile. The garbage made before is collected first.
 */
export async function closeRemotely(
  gw: { url: string },
  agent: LongSessionAgent,
  sid: string,
  answerFile: string,
  probe: StallProbe = 'timer',
): Promise<ClosedRemotely> {
  const client = await startClient<{ status: number; probes: number }>(
    `const base = ${JSON.stringify(gw.url)};
    let probes = 0; let stop = false;
    const probing = (async () => { while (!stop) { const r = await fetch(base + '/healthz'); await r.text(); probes++; } })();
    const r = await fetch(base + ${JSON.stringify(`/sessions/${sid}/close`)}, { method: 'POST',
      headers: { authorization: ${JSON.stringify(`Bearer ${agent.token}`)}, 'content-type': 'application/json' }, body: '{}' });
    const body = Buffer.from(await r.arrayBuffer());
    stop = true; await probing;
    (await import('node:fs')).writeFileSync(${JSON.stringify(answerFile)}, body);
    process.stdout.write(JSON.stringify({ status: r.status, probes }));`,
  );
  fullGc();
  const started = performance.now();
  const { value, stall } = await measureStall(() => client.go(), probe);
  return { ...value, stall, ms: performance.now() - started };
}

/**
 * The baseline of {@link closeRemotely}: the same client probing /healthz for `ms`
 * milliseconds with no close, and the longest stall meanwhile — what ordinary requests, the
 * probe and the collector alone make of the loop, beside what a close or an export adds.
 */
export async function probeRemotely(
  gw: { url: string },
  ms: number,
  probe: StallProbe = 'timer',
): Promise<Stall> {
  const client = await startClient<{ probes: number }>(
    `const base = ${JSON.stringify(gw.url)}; const until = performance.now() + ${Math.round(ms)};
    let probes = 0;
    while (performance.now() < until) { const r = await fetch(base + '/healthz'); await r.text(); probes++; }
    process.stdout.write(JSON.stringify({ probes }));`,
  );
  fullGc();
  return (await measureStall(() => client.go(), probe)).stall;
}

/** What the export's client saw: the status and the bytes it read. */
export interface ExportedRemotely {
  status: number;
  bytes: number;
  stall: Stall;
}

/**
 * `GET /sessions/{sid}/audit` from a client in another process, which reads the ~14 MB as it
 * comes into `file`; the longest stall of this process's loop meanwhile (the garbage made
 * before is collected first).
 */
export async function exportRemotely(
  gw: { url: string },
  agent: LongSessionAgent,
  sid: string,
  file: string,
  probe: StallProbe = 'timer',
): Promise<ExportedRemotely> {
  const client = await startClient<{ status: number; bytes: number }>(
    `const r = await fetch(${JSON.stringify(`${gw.url}/sessions/${sid}/audit`)}, { headers: { authorization: ${JSON.stringify(`Bearer ${agent.token}`)} } });
    const out = (await import('node:fs')).createWriteStream(${JSON.stringify(file)});
    let bytes = 0; for await (const c of r.body) { bytes += c.byteLength; out.write(c); }
    await new Promise((done) => out.end(done));
    process.stdout.write(JSON.stringify({ status: r.status, bytes }));`,
  );
  fullGc();
  const { value, stall } = await measureStall(() => client.go(), probe);
  return { ...value, stall };
}
