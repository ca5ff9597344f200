/**
 * The shapes of gateway sessions (docs/spec/mcp.md, docs/spec/binding.md): the gateway's signing
 * identity, a session row as stored, the facts bound at creation, and the limits of default
 * sessions. The service that owns them is ./service.ts.
 */
import type { KeyObject } from 'node:crypto';
import type { Ed25519Jwk } from '@cmcp/verify/format/binding';

/** The gateway's in-memory signing identity (docs/spec/binding.md): never written to disk. */
export interface GatewayKey {
  privateKey: KeyObject;
  jwk: Ed25519Jwk;
  /** 32-byte RFC 7638 thumbprint. */
  thumbprint: Buffer;
}

/** A session row. */
export interface SessionRow {
  session_id: string;
  agent_id: string;
  is_default: number;
  status: 'open' | 'closed';
  created_at: string;
  created_ms: number;
  closed_at: string | null;
  chain_root: string;
  key_thumbprint: string;
  call_count: number;
  binding_json: string;
  /** instance_id of the gateway that opened the session. */
  owner: string;
  /**
   * PostgreSQL: the session's `session_sensitivity` level (0 without a row), read with the row
   * (call/sensitivity.ts). Absent on SQLite, whose level call/sensitivity.ts reads itself.
   */
  sensitivity_level?: number;
}

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
