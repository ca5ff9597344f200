/**
 * The `tls` section (docs/spec/attested-tls.md, docs/operations.md#tls): TLS on the agent and
 * metrics listeners, with a certificate from files (an operator's CA) or generated inside the
 * gateway at start-up and bound into its hardware evidence. Absent: plain HTTP, allowed on
 * loopback only; `tls: off` keeps plain HTTP beyond loopback, with a warning.
 */
import { z } from 'zod';

/** Certificate and key (PEM) from files; the chain may follow the leaf in `cert_file`. */
const tlsFiles = z.strictObject({
  cert_file: z.string().min(1),
  key_file: z.string().min(1),
});

export const tlsSchema = z.union([
  z.literal('off'),
  z.strictObject({
    /**
     * `generated` (default): a P-256 key made in the process at start-up, never written, its
     * SubjectPublicKeyInfo hash bound into the hardware evidence that the self-signed certificate
     * carries. Or `{cert_file, key_file}`: the operator's certificate; its key is bound too
     * (`key_origin: file`) and the evidence is served at /.well-known/cmcp/tls-evidence only.
     */
    certificate: z.union([z.literal('generated'), tlsFiles]).default('generated'),
    /** Lowest protocol version accepted. */
    min_version: z.enum(['TLSv1.3', 'TLSv1.2']).default('TLSv1.3'),
    /**
     * Seconds between rotations of a generated key (a fresh key and binding; open connections
     * keep the old one until they close). 0: never.
     */
    rotation_interval_s: z.number().int().min(0).max(31_536_000).default(86_400),
    /**
     * Lifetime of a generated certificate and its binding (`not_after`), seconds. Default: twice
     * the rotation interval (or 7 days without rotation).
     */
    validity_s: z.number().int().min(60).max(31_536_000).optional(),
    /** Further DNS names or IP addresses for a generated certificate's subjectAltName. */
    names: z.array(z.string().min(1).max(253)).default([]),
  }),
]);

export type TlsConfig = z.infer<typeof tlsSchema>;
/** The section when TLS is on. */
export type TlsOn = Exclude<TlsConfig, 'off'>;

/** A generated certificate's lifetime, seconds. */
export function tlsValidityS(t: TlsOn): number {
  return t.validity_s ?? (t.rotation_interval_s > 0 ? 2 * t.rotation_interval_s : 7 * 86_400);
}

/** What the listener refinement reads of the whole config. */
interface Listeners {
  dev_mode: boolean;
  listen: { host: string };
  metrics: { listen?: { host: string } | undefined; allow_remote: boolean };
  tls?: TlsConfig | undefined;
}

/**
 * A listener beyond loopback needs TLS unless `tls: off` says so; the metrics listener, which
 * has no authentication, needs `metrics.allow_remote` too. (dev_mode refuses a main listener
 * beyond loopback on its own.)
 */
export function refineListeners(
  c: Listeners,
  ctx: z.RefinementCtx,
  isLoopback: (h: string) => boolean,
): void {
  if (c.metrics.listen && !c.metrics.allow_remote && !isLoopback(c.metrics.listen.host)) {
    ctx.addIssue({
      code: 'custom',
      path: ['metrics', 'listen', 'host'],
      message: `the metrics listener has no authentication: loopback only unless metrics.allow_remote is true; refusing ${c.metrics.listen.host}`,
    });
  }
  if (c.tls !== undefined) return;
  const exposed = [
    ...(isLoopback(c.listen.host) || c.dev_mode ? [] : [['listen', 'host', c.listen.host]]),
    ...(c.metrics.listen && !isLoopback(c.metrics.listen.host)
      ? [['metrics', 'listen', 'host', c.metrics.listen.host]]
      : []),
  ];
  for (const p of exposed)
    ctx.addIssue({
      code: 'custom',
      path: p.slice(0, -1) as string[],
      message: `${p.at(-1)} is beyond loopback: configure \`tls\` (a generated, attested certificate or files), or say \`tls: off\` to serve plain HTTP`,
    });
}

/** Resolves the section's file paths against the config file's folder. */
export function resolveTlsPaths(t: TlsConfig | undefined, abs: (p: string) => string): void {
  if (!t || t === 'off' || t.certificate === 'generated') return;
  t.certificate.cert_file = abs(t.certificate.cert_file);
  t.certificate.key_file = abs(t.certificate.key_file);
}
