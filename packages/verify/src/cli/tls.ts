/**
 * `cmcp-verify tls https://host:port` (docs/verification.md#attested-tls): connects, takes the
 * server's certificate and runs the attested-TLS check of ../tls/check.ts on it — nothing is
 * sent over the connection. Prints the accepted binding (or the refusal's code and reason).
 * Exit codes: 0 accepted, 1 refused (the code on stdout/stderr), 2 usage or unreadable input.
 */
import type { Command } from 'commander';
import { CmcpError } from '../errors/index.js';
import type { AttestedTlsResult } from '../tls/check.js';
import { connectAttested } from '../tls/client.js';
import { errorLine, loadPolicyOptions, processIo, VerifyInputError, type VerifyIo } from './input.js';

/** Options of `cmcp-verify tls`. */
export interface VerifyTlsCliOptions {
  measurement?: string[];
  policyHash?: string;
  catalogHash?: string;
  trustStore?: string;
  referenceValues?: string;
  maxAge?: string;
  allowUnanchored?: boolean;
  allowFileKey?: boolean;
  servername?: string;
  json?: boolean;
}

/**
 * Runs the check against `target`.
 * @returns the exit code (0 accepted, 1 refused, 2 usage).
 */
export async function runVerifyTls(target: string, opts: VerifyTlsCliOptions, io: VerifyIo): Promise<number> {
  const label = 'cmcp-verify tls';
  let url: URL;
  let pins: Parameters<typeof connectAttested>[1];
  try {
    url = new URL(target);
    if (url.protocol !== 'https:') throw new VerifyInputError(`${target} is not an https:// URL`);
    const policy = loadPolicyOptions(opts);
    const maxAgeS = opts.maxAge === undefined ? undefined : Number(opts.maxAge);
    if (maxAgeS !== undefined && !(Number.isInteger(maxAgeS) && maxAgeS > 0))
      throw new VerifyInputError('--max-age must be a whole number of seconds');
    pins = {
      trustStore: policy.trustStore,
      ...(policy.referenceValues ? { referenceValues: policy.referenceValues } : {}),
      ...(policy.now ? { now: policy.now } : {}),
      ...(opts.measurement?.length ? { gatewayMeasurements: opts.measurement } : {}),
      ...(opts.policyHash ? { policyBundleHash: opts.policyHash } : {}),
      ...(opts.catalogHash ? { catalogHash: opts.catalogHash } : {}),
      ...(maxAgeS ? { maxAgeS } : {}),
      allowUnanchored: opts.allowUnanchored === true,
      allowFileKey: opts.allowFileKey === true,
    };
  } catch (e) {
    io.stderr(errorLine(label, e instanceof TypeError ? new VerifyInputError(`${target} is not a URL`) : e));
    return 2;
  }
  const outcome = await new Promise<{ ok: AttestedTlsResult } | { err: Error }>((resolve) => {
    let accepted: AttestedTlsResult | null = null;
    connectAttested(
      {
        host: url.hostname.replace(/^\[|\]$/g, ''),
        port: Number(url.port) || 443,
        ...(opts.servername ? { servername: opts.servername } : {}),
        timeout: 15_000,
      },
      pins,
      (err, socket) => {
        socket?.destroy();
        resolve(err ? { err } : { ok: accepted as AttestedTlsResult });
      },
      (r) => {
        accepted = r;
      },
    );
  });
  if ('err' in outcome) {
    const code = outcome.err instanceof CmcpError ? outcome.err.code : 'TLS_CONNECT_FAILED';
    if (!(outcome.err instanceof CmcpError)) {
      io.stderr(`${label}: cannot connect to ${url.host}: ${outcome.err.message.slice(0, 200)}\n`);
      return 2;
    }
    io.stdout(
      opts.json
        ? `${JSON.stringify({ accepted: false, code, reason: outcome.err.message })}\n`
        : `REFUSED ${url.host}: ${code}: ${outcome.err.message}\n`,
    );
    return 1;
  }
  const { preimage, verdict } = outcome.ok;
  io.stdout(
    opts.json
      ? `${JSON.stringify({ accepted: true, verdict, binding: preimage })}\n`
      : `ACCEPTED ${url.host}: ${verdict}, gateway_measurement ${preimage.gateway_measurement}, instance ${preimage.instance_id}, key ${preimage.spki_sha256} (sequence ${preimage.sequence}, issued ${preimage.issued_at}, until ${preimage.not_after})\n`,
  );
  return 0;
}

/** Adds `tls <url>` to `program`. */
export function registerVerifyTlsCommand(program: Command, name = 'tls'): Command {
  return program
    .command(name)
    .description(
      "check a server's attested-TLS certificate before speaking to it; exit 0 accepted, 1 refused, 2 usage",
    )
    .argument('<url>', 'https://host:port')
    .option(
      '--measurement <sha256:hex>',
      'accepted gateway measurement (repeatable; or reference values gateway.measurements)',
      (v: string, prev: string[] = []) => [...prev, v],
    )
    .option('--policy-hash <sha256:hex>', 'pin: the binding must name this policy bundle hash')
    .option('--catalog-hash <sha256:hex>', 'pin: the binding must name this catalog hash')
    .option('--trust-store <file>', "pinned roots (default: the package's attestation/trust-store.yaml)")
    .option('--reference-values <file>', 'reference values YAML')
    .option('--max-age <seconds>', 'oldest acceptable binding (default 172800)')
    .option('--allow-unanchored', 'accept evidence that chains to no pinned root (test TPMs)')
    .option('--allow-file-key', "accept a key from the operator's files (key_origin file)")
    .option('--servername <name>', 'TLS SNI name (default: the URL host)')
    .option('--json', 'print the result as JSON')
    .exitOverride((err) => {
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (target: string, opts: VerifyTlsCliOptions) => {
      process.exitCode = await runVerifyTls(target, opts, processIo());
    });
}
