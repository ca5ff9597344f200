/**
 * The certificate table returned with an extended SEV-SNP report (GHCB specification 56421
 * §4.1.8.1; SEV-SNP ABI 56860 §7.3 MSG_REPORT_REQ extended): entries of {GUID[16],
 * offset u32 LE, length u32 LE}, terminated by an all-zero entry, offsets from the table start.
 */
import { ByteReader, ByteWriter } from '../reader.js';

/** Certificate table GUIDs, in RFC 4122 (text) byte order as hosts write them. */
export const SNP_CERT_GUIDS = {
  vcek: '63da758d-e664-4564-adc5-f4b93be8accd',
  vlek: 'a8074bc2-a25a-483e-aae6-39c045a0b8a1',
  ask: '4ab7b379-bbac-4fe4-a02f-05aef327c782',
  ark: 'c0b406a4-a803-4952-9743-3fb6014cd0ae',
} as const;
export type SnpCertKind = keyof typeof SNP_CERT_GUIDS | 'other';

/** One certificate of the table. */
export interface SnpCertEntry {
  guid: string;
  kind: SnpCertKind;
  data: Buffer;
}

const MAX_ENTRIES = 64;

function guidText(b: Uint8Array): string {
  const h = Buffer.from(b).toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** The 16 bytes of a GUID given as text. */
export function guidBytes(text: string): Buffer {
  return Buffer.from(text.replace(/-/g, ''), 'hex');
}

/**
 * Parses a certificate table strictly: entries must be followed by the zero terminator, point
 * past the header and inside the blob, not overlap, and carry a known GUID at most once. An
 * empty blob is an empty table; bytes after the last certificate are allowed (the buffer is
 * page-sized).
 * @throws AbiError SNP_CERT_TABLE_MALFORMED (message `certificate table: …`)
 */
export function parseCertTable(blob: Uint8Array): SnpCertEntry[] {
  if (blob.length === 0) return [];
  const r = new ByteReader(blob, {
    structure: 'certificate table',
    littleEndian: true,
    truncated: 'SNP_CERT_TABLE_MALFORMED',
    malformed: 'SNP_CERT_TABLE_MALFORMED',
    trailing: 'SNP_CERT_TABLE_MALFORMED',
    truncatedMessage: () => 'certificate table: no zero terminator entry',
  });
  const bad = (why: string) => r.invalid(why);
  const headers: { guid: Buffer; offset: number; length: number }[] = [];
  for (;;) {
    const guid = r.bytes(16, 'guid');
    const offset = r.u32('offset');
    const length = r.u32('length');
    if (offset === 0 && length === 0 && guid.every((b) => b === 0)) break;
    headers.push({ guid, offset, length });
    if (headers.length > MAX_ENTRIES) throw bad(`more than ${MAX_ENTRIES} entries`);
  }
  const pos = r.offset;
  const seen = new Set<string>();
  const ranges: [number, number][] = [];
  const out: SnpCertEntry[] = [];
  for (const [i, h] of headers.entries()) {
    if (h.length === 0) throw bad(`entry ${i} is empty`);
    if (h.offset < pos) throw bad(`entry ${i} points into the table header (offset ${h.offset} < ${pos})`);
    if (h.offset + h.length > blob.length) {
      throw bad(
        `entry ${i} (offset ${h.offset}, length ${h.length}) runs past the end (${blob.length} bytes)`,
      );
    }
    for (const [a, b] of ranges) {
      if (h.offset < b && a < h.offset + h.length) throw bad(`entry ${i} overlaps another entry`);
    }
    ranges.push([h.offset, h.offset + h.length]);
    const guid = guidText(h.guid);
    if (seen.has(guid)) throw bad(`GUID ${guid} appears twice`);
    seen.add(guid);
    const kind = (Object.entries(SNP_CERT_GUIDS).find(([, g]) => g === guid)?.[0] ?? 'other') as SnpCertKind;
    out.push({ guid, kind, data: Buffer.from(blob.subarray(h.offset, h.offset + h.length)) });
  }
  return out;
}

/** Builds a certificate table (the inverse of {@link parseCertTable}). */
export function buildCertTable(entries: { guid: string; data: Uint8Array }[]): Buffer {
  const header = (entries.length + 1) * 24;
  const w = new ByteWriter(true);
  let cursor = header;
  for (const e of entries) {
    w.bytes(guidBytes(e.guid)).u32(cursor).u32(e.data.length);
    cursor += e.data.length;
  }
  w.bytes(new Uint8Array(24));
  for (const e of entries) w.bytes(e.data);
  return w.done();
}
