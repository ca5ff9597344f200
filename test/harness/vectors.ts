/**
 * Locates `../shared/vectors`. Tests never copy vectors into the repo. Where the folder is
 * absent, tests skip with a visible message — unless CMCP_REQUIRE_VECTORS=1 (CI), in which
 * case a missing folder is a failure.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Absolute path of the shared vectors folder (may not exist). */
export const VECTORS_DIR = process.env.CMCP_VECTORS_DIR ?? resolve(repoRoot, '..', 'shared', 'vectors');

/** Absolute path of the shared cases folder (may not exist). */
export const CASES_DIR = resolve(repoRoot, '..', 'shared', 'cases');

/**
 * True when vectors are available. When they are not: throws if CMCP_REQUIRE_VECTORS=1,
 * else prints a visible skip notice and returns false (use with `describe.skipIf(!hasVectors())`).
 */
export function hasVectors(): boolean {
  if (existsSync(VECTORS_DIR)) return true;
  if (process.env.CMCP_REQUIRE_VECTORS === '1') {
    throw new Error(`CMCP_REQUIRE_VECTORS=1 but the vectors folder is missing: ${VECTORS_DIR}`);
  }
  console.warn(`\n*** SKIPPING vector tests: ${VECTORS_DIR} not found ***\n`);
  return false;
}

/** Path of a file under the vectors folder. */
export function vectorPath(...parts: string[]): string {
  return join(VECTORS_DIR, ...parts);
}
