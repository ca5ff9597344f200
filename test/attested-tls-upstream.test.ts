/**
 * An upstream in a TEE of its own (`upstreams[].attested_tls`, docs/spec/attested-tls.md#upstreams):
 * a gateway forwards to another cmcp gateway on swtpm over attested TLS, records the accepted
 * binding in each call's terminal entry, and refuses an upstream of another measurement
 * before sending it anything.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { type AttestedGateway, startAttestedGateway } from './harness/attested-tls.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let tee: AttestedGateway;
let counting: CountingServer;
const env = 'CMCP_TEST_TEE_TOKEN';
beforeAll(async () => {
  counting = await startCountingServer();
  tee = await startAttestedGateway({}, [{ name: 'c', transport: 'http', url: counting.url }]);
  process.env[env] = 'alice-token';
}, 60_000);
afterAll(async () => {
  await tee?.stop();
  await counting?.close();
  delete process.env[env];
});

/** A gateway whose one upstream is the TEE gateway's /mcp, checked with `measurements`. */
async function frontGateway(measurements: string[]): Promise<{ gw: Gateway; cfg: TestConfig }> {
  const cfg = await writeConfig({
    upstreams: [
      {
        name: 'tee',
        transport: 'http',
        url: `${tee.gw.url}/mcp`,
        required: false,
        headers: { authorization: { env, prefix: 'Bearer ' } },
        attested_tls: { measurements, trust_store: tee.trustStorePath },
      },
    ],
  });
  return { gw: await startInProcess(cfg), cfg };
}

describe('an upstream over attested TLS', () => {
  it("records the upstream's accepted binding in each call's terminal entry", async () => {
    const { gw, cfg } = await frontGateway([String(tee.gw.facts.gatewayMeasurement)]);
    try {
      const tools = gw.upstreams.listTools().map((t) => t.name);
      const tool = tools.find((n) => n.endsWith('record'));
      expect(tool, tools.join(',')).toBeDefined();
      const sid = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
      const r = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: tool, arguments: { a: 1 }, _cmcp: { session_id: sid } },
      });
      expect(r.body.error).toBeUndefined();
      const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body;
      const entries = (bundle.entries as { canonical: string }[]).map((e) => JSON.parse(e.canonical));
      const call = entries.find((e) => e.entry_type === 'tool_call' && e.disposition === 'completed');
      expect(call?.detail?.upstream_attested_tls).toMatchObject({
        instance_id: 'gateway',
        gateway_measurement: tee.gw.facts.gatewayMeasurement,
        verdict: 'hardware-attested',
        spki_sha256: tee.gw.tls?.evidence()?.binding.preimage.spki_sha256,
      });
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('refuses an upstream of another measurement before sending it anything', async () => {
    const before = counting.invocations.length;
    const { gw, cfg } = await frontGateway([`sha256:${'0'.repeat(64)}`]);
    try {
      expect(gw.upstreams.listTools().filter((t) => t.name.startsWith('tee'))).toEqual([]);
      expect(counting.invocations.length).toBe(before);
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});
