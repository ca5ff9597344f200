/**
 * The Node-only side of the trust store and reference values: reading them from files, and
 * finding the package's `attestation/` folder. The browser entry does not import this module.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseReferenceValues, parseTrustStore, type ReferenceValues, type TrustStore } from './trust.js';

/** Reads a trust store file. @throws PolicyFileError, or an fs error when unreadable */
export function loadTrustStore(path: string): TrustStore {
  return parseTrustStore(readFileSync(path, 'utf8'));
}

/** Reads a reference values file. @throws PolicyFileError, or an fs error when unreadable */
export function loadReferenceValues(path: string): ReferenceValues {
  return parseReferenceValues(readFileSync(path, 'utf8'));
}

/**
 * The repository's `attestation/` folder (found by walking up from this module, so it works
 * from `src/` and from `dist/src/`), or null when not found.
 */
export function defaultAttestationDir(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, 'attestation', 'trust-store.yaml');
    if (existsSync(candidate)) return join(dir, 'attestation');
    dir = resolve(dir, '..');
  }
  return null;
}
