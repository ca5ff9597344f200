/**
 * Attested TLS for Node clients (docs/spec/attested-tls.md#client-checks): the check of
 * ./check.ts wired into a connection before any byte of a request is written.
 *
 * - {@link attestedConnect}: an undici `connect` option (`new Agent({ connect: attestedConnect(o) })`),
 *   the Dispatcher route used by `fetch` and the MCP SDK's Streamable HTTP transport.
 * - {@link AttestedHttpsAgent}: a node:https Agent that hands a socket to a request only once
 *   the check passed.
 * - {@link attestedCheckServerIdentity}: a node:tls `checkServerIdentity` hook, for certificates
 *   the client's CA store already accepts (Node calls the hook only after the chain verified;
 *   a generated gateway certificate is self-signed, so use the two above for it).
 *
 * The connector and the agent replace the CA-chain check by the evidence: the identity of the
 * server is what its hardware evidence binds, not a name a CA vouched for. TLS sessions are
 * not resumed, so every connection is checked on a full handshake.
 */
import type { RequestOptions } from 'node:http';
import { type AgentOptions, Agent as HttpsAgent } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import {
  type ConnectionOptions,
  checkServerIdentity,
  connect,
  type PeerCertificate,
  type TLSSocket,
} from 'node:tls';
import { CmcpError } from '../errors/index.js';
import { type AttestedTlsOptions, type AttestedTlsResult, verifyAttestedCertificate } from './check.js';

/** Called with each accepted server (for logs, or to record what the agent talked to). */
export type OnAttested = (result: AttestedTlsResult, socket: TLSSocket) => void;

/**
 * Opens a TLS connection and checks the server before handing the socket out.
 * @param done gets the socket once accepted, or the refusal (a CmcpError) with the socket destroyed.
 */
export function connectAttested(
  options: ConnectionOptions,
  o: AttestedTlsOptions,
  done: (err: Error | null, socket: TLSSocket | null) => void,
  onAttested?: OnAttested,
): TLSSocket {
  const socket = connect({
    minVersion: 'TLSv1.3',
    ...options,
    rejectUnauthorized: false,
    session: undefined,
  });
  let settled = false;
  const finish = (err: Error | null) => {
    if (settled) return;
    settled = true;
    if (err) {
      socket.destroy();
      done(err, null);
    } else done(null, socket);
  };
  socket.once('secureConnect', () => {
    try {
      const cert = socket.getPeerCertificate(false);
      if (!cert?.raw) throw new CmcpError('TLS_EVIDENCE_MISSING', 'the server sent no certificate');
      const origin = o.origin ?? `${options.servername ?? options.host ?? ''}:${options.port ?? ''}`;
      const result = verifyAttestedCertificate(cert.raw, { ...o, origin });
      onAttested?.(result, socket);
      finish(null);
    } catch (e) {
      finish(e as Error);
    }
  });
  socket.once('error', (e) => finish(e));
  return socket;
}

/** The connect options undici passes to a `connect` function. */
interface UndiciConnectOptions {
  hostname: string;
  host?: string;
  protocol: string;
  port: string;
  servername?: string;
  localAddress?: string | null;
}

/**
 * An undici `connect` option: `new Agent({ connect: attestedConnect(o) })` refuses, before any
 * request is written, every server the check refuses (the request fails with the CmcpError as
 * its `cause`).
 */
export function attestedConnect(o: AttestedTlsOptions, onAttested?: OnAttested) {
  return (opts: UndiciConnectOptions, callback: (...args: [null, Socket] | [Error, null]) => void): void => {
    if (opts.protocol !== 'https:') {
      callback(
        new CmcpError('TLS_EVIDENCE_MISSING', `attested TLS needs https:, not ${opts.protocol}`),
        null,
      );
      return;
    }
    const port = Number(opts.port) || 443;
    connectAttested(
      {
        host: opts.hostname,
        port,
        ...(opts.servername ? { servername: opts.servername } : {}),
        ...(opts.localAddress ? { localAddress: opts.localAddress } : {}),
        ALPNProtocols: ['http/1.1'],
      },
      { ...o, origin: o.origin ?? `${opts.hostname}:${port}` },
      (err, socket) =>
        err || !socket ? callback(err ?? new Error('no socket'), null) : callback(null, socket),
      onAttested,
    );
  };
}

/** A node:https Agent whose sockets are handed to requests only after the check passed. */
export class AttestedHttpsAgent extends HttpsAgent {
  constructor(
    private readonly attested: AttestedTlsOptions,
    options: AgentOptions = {},
    private readonly onAttested?: OnAttested,
  ) {
    super({ ...options, maxCachedSessions: 0 });
  }

  override createConnection(
    options: RequestOptions,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): undefined {
    connectAttested(
      options as ConnectionOptions,
      this.attested,
      (err, s) => callback?.(err, s as unknown as Duplex),
      this.onAttested,
    );
    return undefined;
  }
}

/**
 * A node:tls `checkServerIdentity` hook: the usual host-name check, then the attested-TLS check.
 * Returns the refusal as an Error (Node then destroys the socket before the request is sent).
 */
export function attestedCheckServerIdentity(o: AttestedTlsOptions) {
  return (host: string, cert: PeerCertificate): Error | undefined => {
    const named = checkServerIdentity(host, cert);
    if (named) return named;
    try {
      verifyAttestedCertificate(cert.raw, { ...o, origin: o.origin ?? host });
      return undefined;
    } catch (e) {
      return e as Error;
    }
  };
}
