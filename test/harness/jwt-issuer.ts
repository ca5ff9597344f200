/**
 * A test authorization server's signing side: an ES256 key, its JWKS written to a file (the
 * gateway's `oauth.jwks_file`), and RFC 9068 access tokens minted with jose for one audience.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';

/** What {@link testIssuer} gives: the JWKS file and a token minter. */
export interface TestIssuer {
  /** Path of the JWKS file holding the public key (`kid` k1). */
  jwksFile: string;
  /**
   * An access token for `audience` from `issuer`, subject `token-agent`, scope `tools:read`
   * (overridden by `claims`), valid 300 s from now.
   */
  mint(claims: Record<string, unknown>, audience: string): Promise<string>;
}

/** Makes a key, writes its JWKS into `dir`, and returns the minter for tokens of `issuer`. */
export async function testIssuer(dir: string, issuer: string): Promise<TestIssuer> {
  const key = await generateKeyPair('ES256', { extractable: true });
  const jwksFile = join(dir, 'jwks.json');
  writeFileSync(
    jwksFile,
    JSON.stringify({ keys: [{ ...(await exportJWK(key.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }] }),
  );
  return {
    jwksFile,
    mint(claims, audience) {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ scope: 'tools:read', ...claims })
        .setProtectedHeader({ alg: 'ES256', kid: 'k1', typ: 'at+jwt' })
        .setIssuer(issuer)
        .setAudience(audience)
        .setSubject('token-agent')
        .setIssuedAt(now)
        .setExpirationTime(now + 300)
        .sign(key.privateKey);
    },
  };
}
