/**
 * Whether the PostgreSQL tests run here. PostgreSQL comes from Debian's `postgresql` package
 * (scripts/setup.sh); where it is missing, the tests skip with a visible reason — unless
 * CMCP_REQUIRE_POSTGRES=1 (CI, .ci/run), in which case a missing PostgreSQL is a failure.
 */
import { postgresMissingReason } from '../../testing/postgres.js';

/**
 * True when a throw-away PostgreSQL can be started (testing/postgres.ts). When it cannot:
 * throws if CMCP_REQUIRE_POSTGRES=1, else prints a visible skip notice and returns false
 * (use with `describe.skipIf(!hasPostgres())`).
 */
export function hasPostgres(): boolean {
  const reason = postgresMissingReason();
  if (reason === null) return true;
  if (process.env.CMCP_REQUIRE_POSTGRES === '1') throw new Error(`CMCP_REQUIRE_POSTGRES=1 but ${reason}`);
  console.warn(`\n*** SKIPPING PostgreSQL tests: ${reason} ***\n`);
  return false;
}
