/**
 * Locates the repository's test vectors (`test/vectors`: real evidence and published
 * conformance data, each folder with its PROVENANCE.md; licences in test/vectors/LICENSES).
 * They ship with the repository, so a fresh clone has them. Should the folder be missing
 * (a trimmed checkout), tests skip with a visible message — unless CMCP_REQUIRE_VECTORS=1
 * (CI), in which case a missing folder is a failure.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository's vectors folder (test/vectors). */
export const VECTORS_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'vectors');

/**
 * True when vectors are available. When they are not: throws if CMCP_REQUIRE_VECTORS=1,
 * else prints a visible skip notice and returns false (use with `describe.skipIf(!hasVectors())`).
 */
export function hasVectors(): boolean {
  if (existsSync(join(VECTORS_DIR, 'README.md'))) return true;
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
