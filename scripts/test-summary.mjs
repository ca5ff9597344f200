// The closing lines of `npm test`, from vitest's JSON report and exit code:
//   `N passed, N failed, N skipped`, where failed counts failed tests plus every test file that
//   failed without a failed test (it did not load, or a hook or suite errored), plus one for a
//   non-zero vitest exit that the report does not explain (unhandled error, crashed worker);
//   then a line naming the failed files. Exits 1 when anything failed or the report is missing.
// Usage: node scripts/test-summary.mjs REPORT.json VITEST_EXIT_CODE
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const [reportPath, rcText = '0'] = process.argv.slice(2);
const rc = Number(rcText);
let report;
try {
  report = JSON.parse(readFileSync(reportPath, 'utf8'));
} catch (e) {
  console.log(
    `test: no vitest report (${e.code ?? e.message}); vitest exited ${rc}: result unknown, counted as failed`,
  );
  process.exit(1);
}

const files = report.testResults ?? [];
const failedFiles = files.filter((f) => f.status === 'failed');
const failedTests = report.numFailedTests ?? 0;
// A failed file whose tests did not fail: it failed to load, or errored outside its tests.
const fileErrors = failedFiles.filter((f) => !(f.assertionResults ?? []).some((t) => t.status === 'failed'));
const unexplained = rc !== 0 && failedTests === 0 && fileErrors.length === 0 ? 1 : 0;
const failed = failedTests + fileErrors.length + unexplained;
const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);

console.log(`${report.numPassedTests ?? 0} passed, ${failed} failed, ${skipped} skipped`);
const parts = [];
if (failedTests) parts.push(`${failedTests} test(s)`);
if (fileErrors.length)
  parts.push(`${fileErrors.length} file(s) failed outside any test (load, hook or suite error)`);
if (unexplained) parts.push(`vitest exited ${rc} with no failed test in its report (see its output above)`);
if (parts.length) console.log(`failed: ${parts.join('; ')}`);
if (failedFiles.length) {
  const name = (f) => relative(process.cwd(), f.name);
  console.log(`failed files: ${failedFiles.map(name).join(', ')}`);
  for (const f of fileErrors) {
    const why = (f.message ?? '').split('\n')[0].slice(0, 300);
    if (why) console.log(`  ${name(f)}: ${why}`);
  }
}
process.exit(failed > 0 ? 1 : 0);
