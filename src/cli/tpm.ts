/**
 * `cmcp tpm enroll --config FILE [--replace]`: enrolls the TPM's attestation key by credential
 * activation (docs/attestation.md) using `attestation.tcti` and `attestation.enrollment` from the
 * gateway config, and writes the enrollment record the gateway loads at start-up.
 *
 * `cmcp tpm ek --config FILE`: reads the EK certificate and checks it against the template EK
 * and the pinned roots, without changing the TPM.
 *
 * Exit codes: 0 success; 1 refused (reason code printed); 2 usage or config error.
 */
import { X509Certificate } from 'node:crypto';
import type { Command } from 'commander';
import { Tpm } from '../../native/tpm/index.js';
import { ConfigError, type GatewayConfig, loadConfig } from '../config/index.js';
import { EnrollmentError, enrollTpm, readEk } from '../tee/enrollment.js';
import { chainToRoots, loadAkCa, loadCertFiles } from '../tee/x509.js';

export interface TpmIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}
const stdIo: TpmIo = { stdout: (t) => process.stdout.write(t), stderr: (t) => process.stderr.write(t) };

type TpmAttestation = Extract<GatewayConfig['attestation'], { provider: 'tpm' | 'auto' }>;

function tpmSection(configPath: string): TpmAttestation {
  const cfg = loadConfig(configPath);
  const a = cfg.attestation;
  if (a.provider !== 'tpm' && a.provider !== 'auto') {
    throw new ConfigError(configPath, [
      `attestation.provider: ${a.provider} has no TPM section (use tpm or auto)`,
    ]);
  }
  if (!a.enrollment)
    throw new ConfigError(configPath, ['attestation.enrollment: required for TPM enrollment']);
  return a;
}

/** Runs `cmcp tpm enroll`; returns the exit code. Never throws. */
export async function runEnroll(
  opts: { config: string; replace?: boolean; tcti?: string },
  io: TpmIo = stdIo,
): Promise<number> {
  let a: TpmAttestation;
  try {
    a = tpmSection(opts.config);
  } catch (e) {
    io.stderr(`cmcp tpm enroll: ${(e as Error).message}\n`);
    return 2;
  }
  const e = a.enrollment as NonNullable<TpmAttestation['enrollment']>;
  if (!e.ak_ca_key || !e.ak_ca_cert) {
    io.stderr('cmcp tpm enroll: attestation.enrollment.ak_ca_key and ak_ca_cert are required\n');
    return 2;
  }
  try {
    const record = await enrollTpm({
      tcti: opts.tcti ?? a.tcti,
      ekAlgorithm: e.ek_algorithm,
      akAlgorithm: a.ak_algorithm,
      akHandle: e.ak_handle,
      ekRoots: loadCertFiles(e.ek_roots),
      ekIntermediates: loadCertFiles(e.ek_intermediates),
      akCa: loadAkCa(e.ak_ca_key, e.ak_ca_cert, e.ak_ca_chain),
      akCertDays: e.ak_cert_days,
      recordPath: e.record,
      replace: opts.replace ?? false,
    });
    io.stdout(
      [
        'enrolled',
        `  ak_handle:   0x${record.ak_handle.toString(16)}`,
        `  ak_name:     ${record.ak_name}`,
        `  ek:          ${record.ek.algorithm} (certificate chains to a pinned root)`,
        `  ak_cert:     ${new X509Certificate(Buffer.from(record.ak_cert_chain[0] ?? '', 'base64url')).subject.replace(/\n/g, ', ')}`,
        `  record:      ${e.record}`,
        '',
      ].join('\n'),
    );
    return 0;
  } catch (err) {
    if (err instanceof EnrollmentError) {
      io.stderr(`cmcp tpm enroll: refused: ${err.reason}: ${err.message.slice(0, 400)}\n`);
      return 1;
    }
    io.stderr(`cmcp tpm enroll: ${(err as Error).message.slice(0, 400)}\n`);
    return 2;
  }
}

/** Runs `cmcp tpm ek`; returns the exit code. Never throws. */
export async function runEk(opts: { config: string; tcti?: string }, io: TpmIo = stdIo): Promise<number> {
  let a: TpmAttestation;
  try {
    a = tpmSection(opts.config);
  } catch (e) {
    io.stderr(`cmcp tpm ek: ${(e as Error).message}\n`);
    return 2;
  }
  const e = a.enrollment as NonNullable<TpmAttestation['enrollment']>;
  let tpm: Tpm | null = null;
  try {
    tpm = Tpm.open(opts.tcti ?? a.tcti);
    const { ek, certificate } = readEk(tpm, e.ek_algorithm);
    ek.flush();
    const cert = new X509Certificate(certificate);
    const chain = chainToRoots(certificate, loadCertFiles(e.ek_intermediates), loadCertFiles(e.ek_roots));
    io.stdout(
      [
        `ek:          ${e.ek_algorithm}, certificate key = template EK key`,
        `issuer:      ${cert.issuer.replace(/\n/g, ', ')}`,
        `chain:       ${chain.ok ? `to pinned root ${chain.chain[chain.chain.length - 1]?.subject.replace(/\n/g, ', ')}` : `NOT trusted: ${chain.reason}`}`,
        '',
      ].join('\n'),
    );
    return chain.ok ? 0 : 1;
  } catch (err) {
    const reason = err instanceof EnrollmentError ? `${err.reason}: ` : '';
    io.stderr(`cmcp tpm ek: ${reason}${(err as Error).message.slice(0, 400)}\n`);
    return 1;
  } finally {
    tpm?.close();
  }
}

/** Adds `tpm enroll` and `tpm ek` to `program`. */
export function registerTpmCommand(program: Command): void {
  const tpm = program.command('tpm').description('TPM attestation key enrollment');
  tpm
    .command('enroll')
    .description('enroll the TPM attestation key by credential activation and issue its AK certificate')
    .requiredOption('-c, --config <file>', 'gateway YAML configuration (attestation.enrollment)')
    .option('--replace', 'replace an AK already persisted at the configured handle')
    .option('--tcti <conf>', 'override attestation.tcti')
    .action(async (opts: { config: string; replace?: boolean; tcti?: string }) => {
      process.exitCode = await runEnroll(opts);
    });
  tpm
    .command('ek')
    .description('check the EK certificate against the template EK and the pinned roots')
    .requiredOption('-c, --config <file>', 'gateway YAML configuration (attestation.enrollment)')
    .option('--tcti <conf>', 'override attestation.tcti')
    .action(async (opts: { config: string; tcti?: string }) => {
      process.exitCode = await runEk(opts);
    });
}
