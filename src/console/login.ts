/**
 * Console logins: an operator posts an operator bearer token once; the console then knows the
 * browser by an opaque random session id in an HttpOnly, SameSite=Strict cookie (Secure unless
 * the gateway listens on loopback). The id maps, in this process only, to the operator, an
 * expiry and a per-login CSRF token that every state-changing form must carry. Nothing is
 * written to disk: a restart logs every operator out.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';

/** One logged-in browser. */
export interface ConsoleLogin {
  operatorId: string;
  /** base64url, 32 random bytes: the hidden `_csrf` field of every form. */
  csrf: string;
  /** Date.now() milliseconds after which the login is gone. */
  expiresAt: number;
}

/** The cookie that carries the console session id. */
export const CONSOLE_COOKIE = 'cmcp_console';
/** Where the cookie is sent: console paths only, never the bearer-token API. */
export const CONSOLE_PATH = '/operator/ui';

/** Opaque session ids → logins, with expiry and a bound on how many are kept. */
export class ConsoleLogins {
  private readonly logins = new Map<string, ConsoleLogin>();

  /**
   * @param ttlMs how long a login lasts, milliseconds (absolute, not sliding).
   * @param max the most logins kept at once; the oldest is dropped beyond it.
   */
  constructor(
    readonly ttlMs = 60 * 60 * 1000,
    private readonly max = 64,
  ) {}

  /** Opens a login for `operatorId`; returns its session id (base64url, 32 random bytes). */
  open(operatorId: string): { id: string; login: ConsoleLogin } {
    this.prune();
    while (this.logins.size >= this.max) {
      const oldest = this.logins.keys().next().value;
      if (oldest === undefined) break;
      this.logins.delete(oldest);
    }
    const id = randomBytes(32).toString('base64url');
    const login = {
      operatorId,
      csrf: randomBytes(32).toString('base64url'),
      expiresAt: Date.now() + this.ttlMs,
    };
    this.logins.set(id, login);
    return { id, login };
  }

  /** The live login of a cookie value, or null (unknown, malformed or expired). */
  get(id: string | undefined): ConsoleLogin | null {
    if (!id || !/^[A-Za-z0-9_-]{43}$/.test(id)) return null;
    const login = this.logins.get(id);
    if (!login) return null;
    if (login.expiresAt <= Date.now()) {
      this.logins.delete(id);
      return null;
    }
    return login;
  }

  /** Ends a login (logout). */
  close(id: string | undefined): void {
    if (id) this.logins.delete(id);
  }

  private prune(): void {
    const now = Date.now();
    for (const [id, l] of this.logins) if (l.expiresAt <= now) this.logins.delete(id);
  }
}

/** True when a submitted `_csrf` value is the login's token (constant-time compare). */
export function csrfMatches(login: ConsoleLogin, submitted: unknown): boolean {
  if (typeof submitted !== 'string') return false;
  const a = Buffer.from(login.csrf);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}
