/**
 * Attested TLS end to end on swtpm (docs/spec/attested-tls.md): the gateway's generated TLS key
 * is bound into a TPM quote that its certificate carries; a client pinning the test AK CA and
 * the gateway's measurement accepts it over a real handshake.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AttestedGateway, attestedPost, startAttestedGateway } from './harness/attested-tls.js';

let g: AttestedGateway;
beforeAll(async () => {
  g = await startAttestedGateway();
}, 60_000);
afterAll(async () => {
  await g?.stop();
});

describe('attested TLS on the agent listener', () => {
  it('serves https and an attested client opens a session over it', async () => {
    expect(g.gw.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(await attestedPost(g.gw.url, g.pins)).toEqual({ status: 201 });
  });
});
