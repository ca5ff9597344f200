/**
 * A real claim and audit bundle for relying-party tests: a gateway with the TPM provider on a
 * fresh swtpm (ECC P-256 AK, PCRs 0,1,2,7 + the measurement PCR), one session with one call to a
 * counting upstream, closed. The claim verifies as hardware-unanchored (no AK certificate chain).
 */
import type { AuditBundle, Claim } from '@cmcp/verify/formats';
import type { Gateway } from '../../src/gateway/lifecycle/start.js';
import { startSwtpm } from '../../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from '../fixtures/counting-server.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './gateway.js';

/** A closed TPM-bound session's claim and bundle; `stop()` ends the gateway, swtpm and upstream. */
export async function tpmBoundClaim(): Promise<{ claim: Claim; bundle: AuditBundle; stop(): Promise<void> }> {
  let up: CountingServer | undefined;
  let tpm: Awaited<ReturnType<typeof startSwtpm>> | undefined;
  let cfg: TestConfig | undefined;
  let gw: Gateway | undefined;
  const stop = async () => {
    await gw?.close();
    await tpm?.stop();
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  };
  try {
    up = await startCountingServer();
    tpm = await startSwtpm();
    cfg = await writeConfig({
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
      attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 1, 2, 7] },
    });
    gw = await startInProcess(cfg);
    const sid = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'c.record', arguments: { a: 1 }, _cmcp: { session_id: sid } },
    });
    const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body as Claim;
    const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body as AuditBundle;
    return { claim, bundle, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
