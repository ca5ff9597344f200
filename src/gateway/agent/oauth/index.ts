/** OAuth 2.1 resource server (docs/operations.md#oauth-access-tokens): JWT access tokens for agents. */
export {
  looksLikeJwt,
  OAuthVerifier,
  type TokenPrincipal,
  type TokenRefusal,
  TokenRefused,
} from './verifier.js';

import { looksLikeJwt } from './verifier.js';

/** The JWS of an `Authorization: Bearer <jwt>` header (RFC 6750 §2.1), or null. At most 8 KiB. */
export function bearerJwt(header: string | undefined): string | null {
  const m = header ? /^Bearer ([\x21-\x7e]{1,8192})$/i.exec(header) : null;
  return m && looksLikeJwt(m[1] as string) ? (m[1] as string) : null;
}
