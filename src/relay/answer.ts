/** The answer of a relayed method's handler, and errors from the one registry. */
import { ERRORS, type ErrorCode } from '../errors/index.js';
import type { MethodHandler } from './channel.js';

export type Answer = Awaited<ReturnType<MethodHandler>>;

/** A JSON-RPC error from the registry (`data.error_code` names it). */
export function registryError(code: ErrorCode, message: string, data: Record<string, unknown> = {}): Answer {
  return { error: { code: ERRORS[code].rpc, message, data: { error_code: code, ...data } } };
}
