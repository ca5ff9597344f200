/**
 * Rendering of a {@link VerificationReport} as human-readable text or JSON.
 */
import {
  type CheckStatus,
  CLAIM_SIGNATURE_CHECK,
  type ClaimSigner,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  NOT_FRESH_NO_NONCE,
  type Verdict,
  type VerificationReport,
} from './result.js';

const VERDICT_TEXT: Record<Verdict, string> = {
  'hardware-attested':
    'hardware signature valid and bound to the claim; signing key chained to a pinned root',
  'hardware-unanchored':
    'hardware-format evidence is valid and bound to the claim, but its signing key is NOT chained to a pinned root',
  'signed-only': 'the claim signature is valid; there is no valid hardware binding',
  invalid: 'at least one check failed',
};

const SIGNER_TEXT: Record<ClaimSigner, string> = {
  'hardware-attested': 'the signing key is bound by hardware evidence chaining to a pinned root',
  'pinned-key': 'the signing key is one the verifier pinned',
  'self-asserted': 'nothing but the claim itself vouches for the signing key: anyone could have signed it',
};

/** Raw evidence (no claim): nothing is "bound to the claim"; freshness is stated as checked. */
function rawVerdictText(report: VerificationReport): string {
  const binding = report.checks.find((c) => c.id === HARDWARE_BINDING_CHECK);
  const fresh = binding?.status === 'pass' ? 'carries the expected nonce / report data' : NOT_FRESH_NO_NONCE;
  switch (report.verdict) {
    case 'hardware-attested':
      return `hardware signature valid; signing key chained to a pinned root; ${fresh}`;
    case 'hardware-unanchored':
      return `hardware signature valid, but its signing key is NOT chained to a pinned root; ${fresh}`;
    case 'signed-only':
      return 'no hardware signature was verified';
    default:
      return VERDICT_TEXT.invalid;
  }
}

const STATUS_TEXT: Record<CheckStatus, string> = {
  pass: 'PASS',
  fail: 'FAIL',
  absent: 'ABSENT',
  'not-applicable': 'N/A',
};

/** Strips control characters (other than none) so untrusted detail cannot drive the terminal. */
function clean(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: removing control characters is the point
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

/**
 * Human-readable report: a verdict line, every check (status, id, reason code, detail), the
 * trust anchors used (stating explicitly when the AK is not anchored to a pinned root), every
 * appraised evidence field marked VERIFIED / UNVERIFIED, the notes and any execution_id groups.
 * Ends with a newline.
 */
export function renderText(report: VerificationReport): string {
  const lines: string[] = [];
  const raw = !report.checks.some((c) => c.id === CLAIM_SIGNATURE_CHECK);
  const text = raw ? rawVerdictText(report) : VERDICT_TEXT[report.verdict];
  lines.push(`Verdict: ${report.verdict.toUpperCase()} (${text})`);
  if (report.signer) lines.push(`Signer: ${report.signer.toUpperCase()} (${SIGNER_TEXT[report.signer]})`);
  if (report.accepted !== undefined) {
    const bar = `${report.required ?? 'hardware-attested'} or a pinned key`;
    lines.push(`Accepted: ${report.accepted ? 'YES' : 'NO'} (policy: ${bar})`);
  }
  const failed = report.checks.filter((c) => c.status === 'fail');
  if (failed.length) lines.push(`Failed: ${failed.map((c) => `${c.id} ${c.reason_code}`).join(', ')}`);
  lines.push('', 'Checks:');
  const idWidth = Math.max(0, ...report.checks.map((c) => c.id.length));
  for (const c of report.checks) {
    lines.push(
      `  ${STATUS_TEXT[c.status].padEnd(6)} ${c.id.padEnd(idWidth)}  ${c.reason_code}: ${clean(c.detail)}`,
    );
  }
  lines.push('', 'Trust anchors:');
  if (report.anchors_used.length === 0) lines.push('  none used');
  for (const a of report.anchors_used) {
    lines.push(`  ${clean(a.name)}  SHA-256 ${a.sha256_fingerprint}`);
    if (a.intermediate) {
      lines.push(
        '    WARNING: this anchor is an intermediate CA pinned with anchor: intermediate, not a self-signed root',
      );
    }
  }
  const anchor = report.checks.find((c) => c.id === HARDWARE_ANCHOR_CHECK);
  if (anchor && anchor.status !== 'pass') {
    lines.push(`  The signing key (AK) is NOT anchored to a pinned root (${anchor.reason_code}).`);
  }
  if (report.event_log) {
    const el = report.event_log;
    lines.push(
      '',
      `Event log (replayed): ${el.events} events; ${el.algorithms.map((a) => `${a.alg}/${a.digest_size}`).join(', ')}; StartupLocality ${el.startup_locality ?? 'none'}`,
    );
    for (const [bank, pcrs] of Object.entries(el.pcrs)) {
      for (const [i, v] of Object.entries(pcrs))
        lines.push(`  ${bank.padEnd(6)} PCR ${i.padStart(2)}  ${clean(v)}`);
    }
  }
  if (report.fields?.length) {
    lines.push('', 'Fields (verified = covered by a checked signature and a chain to a pinned root):');
    const w = Math.max(...report.fields.map((f) => f.name.length));
    for (const f of report.fields) {
      lines.push(
        `  ${(f.verified ? 'VERIFIED' : 'UNVERIFIED').padEnd(10)} ${f.name.padEnd(w)}  ${clean(f.value)}`,
      );
    }
  }
  if (report.notes.length) {
    lines.push('', 'Notes:');
    for (const n of report.notes) lines.push(`  - ${clean(n)}`);
  }
  if (report.entry_counts && Object.keys(report.entry_counts).length) {
    const counts = Object.entries(report.entry_counts).map(([t, n]) => `${clean(t)} ${n}`);
    lines.push('', `Audit entries by type: ${counts.join(', ')}`);
  }
  if (report.execution_id_groups?.length) {
    lines.push('', 'Entries sharing an execution_id (informational; NOT a claim of one logical operation):');
    for (const g of report.execution_id_groups) {
      lines.push(`  ${clean(JSON.stringify(g.execution_id))}: sequence ${g.sequence_numbers.join(', ')}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/** The report as pretty-printed JSON (2-space indent), ending with a newline. */
export function renderJson(report: VerificationReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}
