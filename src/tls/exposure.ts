/**
 * What the listeners' TLS configuration means for an operator, as one status line: said by
 * `cmcp start --check` and logged at start-up. Plain HTTP beyond loopback (`tls: off`) warns:
 * whatever carries the traffic sees every argument, result and bearer token.
 */
import { isLoopback } from '../config/index.js';
import type { TlsConfig } from '../config/tls.js';
import { readTlsFiles } from './key.js';

/** One line about the listeners' TLS. */
export interface TlsExposure {
  status: 'ok' | 'warn' | 'FAIL';
  detail: string;
}

/** Reads the configuration (and the certificate files, when configured) without starting anything. */
export function tlsExposure(cfg: {
  tls?: TlsConfig | undefined;
  listen: { host: string };
  metrics: { listen?: { host: string } | undefined };
}): TlsExposure {
  const hosts = [cfg.listen.host, ...(cfg.metrics.listen ? [cfg.metrics.listen.host] : [])];
  const exposed = hosts.filter((h) => !isLoopback(h));
  const t = cfg.tls;
  if (!t || t === 'off') {
    if (exposed.length)
      return {
        status: 'warn',
        detail: `tls: off on ${exposed.join(', ')} (beyond loopback): plain HTTP, whatever carries the traffic sees every argument, result and bearer token`,
      };
    return { status: 'ok', detail: 'plain HTTP on loopback' };
  }
  if (t.certificate === 'generated')
    return {
      status: 'ok',
      detail: `TLS (${t.min_version}+), key generated at start-up and bound into the evidence; ${t.rotation_interval_s ? `rotated every ${t.rotation_interval_s} s` : 'never rotated'}`,
    };
  try {
    readTlsFiles(t.certificate.cert_file, t.certificate.key_file);
  } catch (e) {
    return { status: 'FAIL', detail: (e as Error).message };
  }
  return {
    status: 'ok',
    detail: `TLS (${t.min_version}+) with ${t.certificate.cert_file}; its key is bound as key_origin "file" (evidence at the well-known route)`,
  };
}
