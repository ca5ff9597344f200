/**
 * The shapes of gateway sessions (docs/spec/mcp.md, docs/spec/binding.md): the gateway's signing
 * identity, a session row as stored, the facts bound at creation, and the limits of default
 * sessions. The service that owns them is ./service.ts.
 */
import type { KeyObject } from 'node:crypto';
import type { Ed25519Jwk } from '@cmcp/verify/formats';
import type { SessionRow } from '../store/port.js';

/** The gateway's in-memory signing identity (docs/spec/binding.md): never written to disk. */
export interface GatewayKey {
  privateKey: KeyObject;
  jwk: Ed25519Jwk;
  /** 32-byte RFC 7638 thumbprint. */
  thumbprint: Buffer;
}

/** A session row (store/port.ts). */
export type { SessionRow };

/** Gateway facts folded into every binding preimage and claim. */
export interface SessionFacts {
  gatewayMeasurement: string | null;
  policyBundleHash: string | null;
  catalogHash: string | null;
  /** `enforcing` | `advisory` | `silent`, or `none` without a policy. */
  enforcementMode: string;
}

/** What `POST /sessions` returns. */
export interface SessionCreated {
  session_id: string;
  chain_root: string;
  binding: { provider: string; status: 'bound' | 'absent'; reason: string | null };
}

export interface SessionLimits {
  defaultMaxCalls: number;
  /** Seconds. */
  defaultMaxAgeS: number;
}
