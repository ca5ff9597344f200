/**
 * The gateway's own list cursor (docs/spec/mcp.md#pagination): an opaque base64url token over
 * the merged list of one method, integrity-protected with HMAC-SHA-256 (RFC 2104) under a key
 * that lives only in this gateway process. It names the method, the offset into the merged list
 * (a stable order: upstreams in configuration order, each upstream's items in its own order),
 * and when it was issued. A cursor that was altered, issued for another method or by another
 * gateway process, or is older than its lifetime is refused with INVALID_PARAMS (-32602).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { CmcpError } from '../errors/index.js';

/** How long a cursor stays valid, ms. */
export const CURSOR_LIFETIME_MS = 10 * 60 * 1000;

interface CursorBody {
  /** The list method it continues. */
  m: string;
  /** Offset of the next item in the merged list. */
  o: number;
  /** Issued at, ms since the epoch. */
  t: number;
}

/** Thrown for a cursor the gateway did not issue for this list, or that expired. */
export class CursorError extends CmcpError {
  declare readonly code: 'LIST_CURSOR_INVALID';
  constructor(message: string) {
    super('LIST_CURSOR_INVALID', message);
    this.name = 'CursorError';
  }
}

/** Issues and checks cursors for one gateway process. */
export class CursorCodec {
  private readonly key: Buffer;

  constructor(
    key: Buffer = randomBytes(32),
    private readonly now: () => number = Date.now,
    private readonly lifetimeMs = CURSOR_LIFETIME_MS,
  ) {
    this.key = key;
  }

  /** An opaque cursor continuing `method` at `offset`. */
  issue(method: string, offset: number): string {
    const body = Buffer.from(JSON.stringify({ m: method, o: offset, t: this.now() } satisfies CursorBody));
    return `${body.toString('base64url')}.${this.mac(body).toString('base64url')}`;
  }

  /**
   * The offset a cursor names.
   * @throws CursorError when it is malformed, its MAC does not match (altered, or another
   *   gateway's), it was issued for another method, or it expired.
   */
  offset(method: string, cursor: unknown): number {
    if (typeof cursor !== 'string' || cursor.length > 512)
      throw new CursorError('cursor is not a gateway cursor');
    const [b, m, extra] = cursor.split('.');
    if (!b || !m || extra !== undefined) throw new CursorError('cursor is not a gateway cursor');
    const body = Buffer.from(b, 'base64url');
    const mac = Buffer.from(m, 'base64url');
    const want = this.mac(body);
    if (mac.length !== want.length || !timingSafeEqual(mac, want))
      throw new CursorError('cursor was not issued by this gateway or was altered');
    let parsed: CursorBody;
    try {
      parsed = JSON.parse(body.toString('utf8')) as CursorBody;
    } catch {
      throw new CursorError('cursor is not a gateway cursor');
    }
    if (parsed.m !== method)
      throw new CursorError(`cursor was issued for ${String(parsed.m)}, not ${method}`);
    if (!Number.isSafeInteger(parsed.o) || parsed.o < 0) throw new CursorError('cursor offset is invalid');
    if (!Number.isFinite(parsed.t) || this.now() - parsed.t > this.lifetimeMs)
      throw new CursorError('cursor expired; list again from the start');
    return parsed.o;
  }

  private mac(body: Buffer): Buffer {
    return createHmac('sha256', this.key).update('cmcp list cursor v1\0').update(body).digest();
  }
}

/**
 * One page of a merged list at a cursor.
 * @throws CursorError for a cursor {@link CursorCodec.offset} refuses, or one past the list's end.
 */
export function pageOf<T>(
  codec: CursorCodec,
  method: string,
  all: T[],
  cursor: unknown,
  pageSize: number,
): { items: T[]; nextCursor?: string } {
  const start = cursor === undefined ? 0 : codec.offset(method, cursor);
  if (start > all.length) throw new CursorError('cursor is past the end of the list; list again');
  const end = start + pageSize;
  const items = all.slice(start, end);
  return end < all.length ? { items, nextCursor: codec.issue(method, end) } : { items };
}
