/**
 * `--require VERDICT`, shared by both verify commands: the weakest verdict the caller accepts.
 * The exit code is 1 for `invalid` and for any verdict weaker than the required one, so a
 * script that checks only the exit code gets what it asked for. Both commands default to
 * `hardware-attested`: raw evidence or a claim anchored to no pinned root proves nothing about
 * which machine produced it (a claim may instead be signed by a key pinned with `--key`).
 */
import { VERDICT_ORDER, type Verdict, verdictAtLeast } from '../result.js';
import { VerifyInputError } from './input.js';

export { VERDICT_ORDER };

/** The `--require` value, or `fallback`. @throws VerifyInputError for anything but the three verdicts */
export function requiredVerdict(value: string | undefined, fallback: Verdict): Verdict {
  const v = value ?? fallback;
  if (!VERDICT_ORDER.includes(v as Verdict) || v === 'invalid') {
    throw new VerifyInputError(`--require must be one of ${VERDICT_ORDER.slice(0, 3).join(', ')}`);
  }
  return v as Verdict;
}

/** Exit code for `verdict` under `minimum`: 0 when at least as strong, else 1. */
export function verdictExitCode(verdict: Verdict, minimum: Verdict): 0 | 1 {
  return verdictAtLeast(verdict, minimum) ? 0 : 1;
}
