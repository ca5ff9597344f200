/**
 * The gateway measurement over the process's life (docs/spec/measurement.md, docs/spec/policy.md#operator-controls): taken at
 * start-up and handed to the attestation provider (the TPM provider extends it into the
 * measurement PCR), taken again after every accepted policy reload, and each time recorded as
 * `gateway_measurement` in the gateway chain — with `attestation_binding_failed` when the
 * provider could not carry it yet (it retries at the next session binding).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { PolicyBundle } from '../policy/bundle.js';
import type { GatewayChainSink } from '../store/port.js';
import {
  type GatewayMeasurement,
  type MeasurementInputs,
  measureGateway,
  remeasureGateway,
} from './index.js';

/**
 * The part of an attestation provider the measurer drives (tee/provider.ts's
 * `AttestationProvider` is one): declared here so measure/ stays below tee/ and session/.
 */
export type MeasuredProvider = {
  readonly name: string;
  start?(measurement: GatewayMeasurement | null): Promise<Record<string, unknown>>;
  remeasure?(measurement: GatewayMeasurement): Promise<Record<string, unknown>>;
  listening?(instance: string): Promise<Record<string, unknown>>;
};

export class GatewayMeasurer {
  private current: GatewayMeasurement | null = null;
  private startedOk = false;
  /** The recording of the last re-measurement (close() waits for it). */
  private recording: Promise<void> = Promise.resolve();

  constructor(
    private readonly provider: MeasuredProvider,
    /** The gateway chain: AuditChain on SQLite, a replica's store on PostgreSQL (gateway/lifecycle/records.ts). */
    private readonly chain: GatewayChainSink,
    /** `gatewayMeasurement` is updated here: sessions bound from now on name the new digest. */
    private readonly facts: { gatewayMeasurement: string | null },
    private readonly log: Logger,
  ) {}

  /**
   * Measures what runs now (code, lockfile, policy, catalog, config), hands it to the provider
   * and records it. Never throws for a provider that is not ready.
   * @returns what `provider.start()` answered (`ok`, `reason`), for the minimum_tier check.
   * @throws (rejects) what the appends throw.
   */
  async start(inputs: MeasurementInputs): Promise<Record<string, unknown>> {
    const measurement = measureGateway(inputs);
    this.current = measurement;
    this.facts.gatewayMeasurement = measurement.json.digest;
    const started = (await this.provider.start?.(measurement)) ?? { ok: true, reason: null };
    await this.chain.appendAwaited(GATEWAY_CHAIN_ID, {
      entry_type: 'gateway_measurement',
      detail: {
        ...measurement.json,
        trigger: 'start-up',
        provider: this.provider.name,
        provider_start: started,
      },
    });
    this.startedOk = started.ok !== false;
    if (started.ok === false) {
      this.log.warn(
        { provider: this.provider.name, reason: started.reason },
        // whether the gateway still starts is decided next (src/tee/tier.ts assertTierReached)
        'attestation provider not ready at start-up',
      );
      await this.bindingFailed('start-up', started.reason);
    }
    if (measurement.json.inputs.code_files === 0)
      this.log.warn('gateway measurement covers no files under dist/');
    return started;
  }

  /**
   * The gateway listens: the provider extends the measurement now (the TPM provider, into the
   * measurement PCR and its event log), recorded as `gateway_measurement_extended`. A start
   * that fails before listening (a busy port) so extends nothing. Never throws for the provider.
   * @throws (rejects) what the append throws.
   */
  async listening(instance: string): Promise<void> {
    if (!this.provider.listening || !this.current) return;
    const result = await this.provider.listening(instance);
    await this.chain.appendAwaited(GATEWAY_CHAIN_ID, {
      entry_type: 'gateway_measurement_extended',
      detail: {
        digest: this.current.json.digest,
        instance,
        provider: this.provider.name,
        provider_extend: result,
      },
    });
    // A provider that was not ready at start-up has its failure recorded already.
    if (result.ok === false && this.startedOk) await this.bindingFailed('listening', result.reason);
  }

  /**
   * After an accepted reload: the same code, lockfile, catalog and config inputs, the new
   * bundle hash. The provider carries it in evidence from now on; the chain records it once the
   * provider has answered (in order with earlier re-measurements).
   */
  reload(bundle: PolicyBundle): void {
    const previous = this.current;
    if (!previous) return;
    const next = remeasureGateway(previous, { policyBundleHash: bundle.hash });
    this.current = next;
    this.facts.gatewayMeasurement = next.json.digest;
    const answered: Promise<Record<string, unknown>> =
      this.provider.remeasure?.(next) ?? Promise.resolve({ ok: true, reason: null });
    this.recording = this.recording.then(async () => {
      const result = await answered;
      try {
        // Awaited: a write lock held by another process does not hold the event loop.
        await this.chain.appendAwaited(GATEWAY_CHAIN_ID, {
          entry_type: 'gateway_measurement',
          detail: {
            ...next.json,
            trigger: 'policy_reload',
            previous_digest: previous.json.digest,
            policy_version: bundle.manifest.version,
            provider: this.provider.name,
            provider_remeasure: result,
          },
        });
        if (result.ok === false) {
          this.log.warn(
            { provider: this.provider.name, reason: result.reason },
            'could not extend the re-measured gateway now; retried at the next session binding',
          );
          await this.chain.appendAwaited(
            GATEWAY_CHAIN_ID,
            this.bindingFailedEntry('policy-reload', result.reason),
          );
        }
      } catch (e) {
        this.log.error(
          { err: (e as Error).message },
          'could not record the gateway measurement after a reload',
        );
      }
    });
    this.log.info(
      { gateway_measurement: next.json.digest, bundle_hash: bundle.hash },
      'gateway re-measured after the policy reload',
    );
  }

  /** Resolves once every re-measurement is recorded. */
  settled(): Promise<void> {
    return this.recording;
  }

  private async bindingFailed(phase: string, reason: unknown): Promise<void> {
    await this.chain.appendAwaited(GATEWAY_CHAIN_ID, this.bindingFailedEntry(phase, reason));
  }

  private bindingFailedEntry(phase: string, reason: unknown) {
    return {
      entry_type: 'attestation_binding_failed',
      detail: { phase, provider: this.provider.name, reason },
    };
  }
}
