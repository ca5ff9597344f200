/**
 * TLS of the gateway's listeners (docs/spec/attested-tls.md, docs/operations.md#tls): the key
 * and certificate the agent and metrics listeners serve, the binding of a generated key into the
 * hardware evidence, and its rotation. Every attached server takes a new key through
 * `tls.Server#setSecureContext`: connections open at a rotation keep the key they shook hands
 * with until they close (they drain), new ones get the new key and binding.
 */
import type { SecureContextOptions } from 'node:tls';
import type { TlsEvidence } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { TlsConfig, TlsOn } from '../config/tls.js';
import { tlsValidityS } from '../config/tls.js';
import type { GatewayKey, SessionFacts } from '../session/types.js';
import type { AttestationProvider } from '../tee/provider.js';
import { attestTlsKey } from './binding.js';
import { selfSignedCertificate } from './certificate.js';
import { generateTlsKey, readTlsFiles, type TlsKey } from './key.js';

/** A server whose TLS context can be replaced (node:tls `Server`, hence `https.Server`). */
export interface SecureContextHolder {
  setSecureContext(options: SecureContextOptions): void;
}

/** What a binding needs from the running gateway. */
export interface TlsBindingInputs {
  instanceId: string;
  key: GatewayKey;
  facts: SessionFacts;
  provider: AttestationProvider;
  log: Logger;
}

/** The listeners' TLS: current key, certificate and evidence. */
export class ListenerTls {
  private servers: SecureContextHolder[] = [];
  private current: { key: TlsKey; certPem: string; evidence: TlsEvidence | null };
  private sequence = 0;
  private timer: NodeJS.Timeout | null = null;
  private rotating: Promise<void> = Promise.resolve();
  private inputs: TlsBindingInputs | null = null;

  private constructor(
    private readonly cfg: TlsOn,
    private readonly names: readonly string[],
    first: { key: TlsKey; certPem: string },
  ) {
    this.current = { ...first, evidence: null };
  }

  /**
   * The key the listeners start with: read from the configured files, or generated with a
   * certificate that carries no evidence yet (bound by {@link bind} once listening).
   * @param names subjectAltName entries of a generated certificate.
   * @throws TlsFilesError for unusable files.
   */
  static async open(cfg: TlsOn, names: readonly string[]): Promise<ListenerTls> {
    if (cfg.certificate !== 'generated')
      return new ListenerTls(cfg, names, readTlsFiles(cfg.certificate.cert_file, cfg.certificate.key_file));
    const key = await generateTlsKey();
    const now = new Date();
    const certPem = await selfSignedCertificate(key, {
      names,
      notBefore: now,
      notAfter: new Date(now.getTime() + tlsValidityS(cfg) * 1000),
      evidence: null,
    });
    return new ListenerTls(cfg, names, { key, certPem });
  }

  /** node:https server options for a listener (fastify's `https`). */
  serverOptions(): SecureContextOptions {
    return { key: this.current.key.privatePem, cert: this.current.certPem, minVersion: this.cfg.min_version };
  }

  /** Registers a listening server for the context updates of bindings and rotations. */
  attach(server: SecureContextHolder): void {
    this.servers.push(server);
  }

  /** The evidence document of the current key (null before the first binding). */
  evidence(): TlsEvidence | null {
    return this.current.evidence;
  }

  /**
   * Binds the current key into the provider's evidence (after the measurement is extended, so
   * the quote covers it) and serves the certificate carrying it; then rotates a generated key
   * every `rotation_interval_s`. A failed bind is logged and served as absent evidence.
   */
  async bind(inputs: TlsBindingInputs): Promise<void> {
    this.inputs = inputs;
    await this.rebind(inputs, this.current.key);
    const every = this.cfg.rotation_interval_s;
    if (this.cfg.certificate === 'generated' && every > 0) {
      this.timer = setInterval(() => {
        this.rotating = this.rotate().catch((e: unknown) =>
          inputs.log.error({ err: (e as Error).message }, 'TLS key rotation failed; the previous key stays'),
        );
      }, every * 1000);
      this.timer.unref();
    }
  }

  /**
   * A fresh generated key with a fresh binding; open connections keep the previous one.
   * @throws Error before the first {@link bind}, or for a key from files (nothing to rotate to).
   */
  async rotate(): Promise<void> {
    if (!this.inputs || this.current.key.origin !== 'generated')
      throw new Error('only a bound, generated TLS key rotates');
    this.sequence += 1;
    await this.rebind(this.inputs, await generateTlsKey());
  }

  private async rebind(inputs: TlsBindingInputs, key: TlsKey): Promise<void> {
    const issuedAt = new Date(Math.floor(Date.now() / 1000) * 1000);
    const notAfter = new Date(issuedAt.getTime() + tlsValidityS(this.cfg) * 1000);
    const { evidence, failure } = await attestTlsKey(key, inputs.key, inputs.facts, inputs.provider, {
      instanceId: inputs.instanceId,
      sequence: this.sequence,
      issuedAt,
      notAfter,
    });
    if (failure)
      inputs.log.warn(
        { provider: inputs.provider.name, reason: failure },
        'TLS key binding failed: attested-TLS clients will refuse this listener',
      );
    const certPem =
      key.origin === 'generated'
        ? await selfSignedCertificate(key, { names: this.names, notBefore: issuedAt, notAfter, evidence })
        : this.current.certPem;
    this.current = { key, certPem, evidence };
    for (const s of this.servers) s.setSecureContext(this.serverOptions());
    inputs.log.info(
      { spki_sha256: key.spkiSha256, sequence: this.sequence, status: evidence.evidence.status },
      'TLS key bound',
    );
  }

  /** Stops rotating (waits for one in progress). */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.rotating;
  }
}

/** The subjectAltName entries of a generated certificate: listen hosts, allowed names, `tls.names`. */
export function certificateNames(
  tls: TlsOn,
  listen: { host: string; allowed_hosts?: readonly string[] | undefined },
  metricsHost?: string,
): string[] {
  const hosts = [
    ...tls.names,
    ...(listen.allowed_hosts ?? []).map((h) => h.replace(/:\d+$/, '')),
    listen.host,
    ...(metricsHost ? [metricsHost] : []),
    'localhost',
    '127.0.0.1',
  ].filter((h) => h !== '0.0.0.0' && h !== '::' && h !== '[::]');
  return [...new Set(hosts)];
}

/**
 * The listeners' TLS for a configuration: null without a `tls` section or with `tls: off`.
 * @throws TlsFilesError for unusable certificate files.
 */
export async function openListenerTls(cfg: {
  tls?: TlsConfig | undefined;
  listen: { host: string; allowed_hosts?: readonly string[] | undefined };
  metrics: { listen?: { host: string } | undefined };
}): Promise<ListenerTls | null> {
  if (!cfg.tls || cfg.tls === 'off') return null;
  return ListenerTls.open(cfg.tls, certificateNames(cfg.tls, cfg.listen, cfg.metrics.listen?.host));
}
