/**
 * `@cmcp/verify/errors`: the shared error class and the registry of codes (docs/spec/errors.md).
 * Each code is stable, upper-snake, and carries an HTTP status (for non-JSON-RPC routes) and a
 * JSON-RPC code. Each package owns its codes: this package registers the verifier's
 * ({@link VERIFY_ERRORS}, ./codes.ts); the gateway (src/errors) and its native attestation
 * layer (native/errors.ts) register theirs with {@link registerErrors} and add them to the
 * {@link ErrorRegistry} type by module augmentation. `docs/errors.md` lists every package's
 * codes (`npm run docs:errors`).
 *
 * JSON-RPC codes: -32700..-32600 are JSON-RPC 2.0 §5.1; cmcp's own codes live in the
 * implementation-defined server-error range -32000..-32099.
 */
import { VERIFY_ERRORS } from './codes.js';
import type { ErrorSpec } from './spec.js';

export {
  ABI_ERRORS,
  ATTESTED_TLS_ERRORS,
  BINDING_BATCH_ERRORS,
  TRANSPARENCY_ERRORS,
  VERIFIER_ERRORS,
  VERIFY_ERRORS,
  VERIFY_INPUT_ERRORS,
} from './codes.js';
export type { ErrorSpec } from './spec.js';

/**
 * Every registered code and its spec, as a type. A package that registers codes widens it:
 * `declare module '@cmcp/verify/errors' { interface ErrorRegistry extends MyCodes {} }`.
 */
export interface ErrorRegistry extends Readonly<Record<keyof typeof VERIFY_ERRORS, ErrorSpec>> {}

/** A registered error code. */
export type ErrorCode = keyof ErrorRegistry & string;

const registered = new Map<string, { owner: string; spec: ErrorSpec }>();

/**
 * Registers a package's codes (at module load). Registering the same table again is a no-op.
 * @param owner who owns the codes (a package or folder name, for the error below and the docs).
 * @throws Error when a code is already registered by another owner or with another spec.
 * @returns `codes`, unchanged.
 */
export function registerErrors<const T extends Record<string, ErrorSpec>>(owner: string, codes: T): T {
  for (const [code, spec] of Object.entries(codes)) {
    const prior = registered.get(code);
    if (prior && (prior.owner !== owner || prior.spec !== spec))
      throw new Error(`error code ${code} is registered twice (${prior.owner}, ${owner})`);
    registered.set(code, { owner, spec });
  }
  return codes;
}

registerErrors('@cmcp/verify', VERIFY_ERRORS);

/**
 * The spec of a registered code.
 * @throws Error when the package owning `code` has not been loaded (a programming error: its
 *   codes register when its errors module is imported).
 */
export function errorSpec(code: ErrorCode): ErrorSpec {
  const found = registered.get(code);
  if (!found) throw new Error(`error code ${code} is not registered`);
  return found.spec;
}

/** Every registered code with its owner, in registration order. */
export function registeredErrors(): { code: ErrorCode; owner: string; spec: ErrorSpec }[] {
  return [...registered].map(([code, { owner, spec }]) => ({ code: code as ErrorCode, owner, spec }));
}

/**
 * The base of every cmcp error: a registered code (so every code is in `docs/errors.md`) and
 * a `name` (each subclass sets its own). `message` is safe to show a caller: it never contains
 * a stack trace and must not echo attacker-controlled text unbounded (use {@link clip}).
 */
export class CmcpError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Extra machine-readable data returned to the caller (JSON-RPC `error.data`). */
    readonly data: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'CmcpError';
  }

  /** The HTTP status of {@link code}. */
  get http(): number {
    return errorSpec(this.code).http;
  }

  /** The JSON-RPC error code of {@link code}. */
  get rpc(): number {
    return errorSpec(this.code).rpc;
  }
}

/** Clips caller-supplied text before it is echoed in a message (docs/spec/errors.md). */
export function clip(text: unknown, max = 80): string {
  const s = typeof text === 'string' ? text : (JSON.stringify(text) ?? String(text));
  return s.length > max ? `${s.slice(0, max)}…(${s.length} chars)` : s;
}
