#!/usr/bin/env node
/**
 * The `cmcp` command line. Usage errors and bad input print one clear line and exit 2;
 * `verify` exits 1 when the verdict is `invalid`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Command } from 'commander';
import { registerCatalogCommand } from './catalog.js';
import { registerExecutionsCommand } from './executions.js';
import { registerMeasureCommand } from './measure.js';
import { registerPolicyCommand } from './policy.js';
import { registerStartCommand } from './start.js';
import { registerTpmCommand } from './tpm.js';
import { registerVerifyCommand } from './verify.js';
import { registerVerifyEvidenceCommand } from './verify-evidence.js';

const program = new Command();
program.name('cmcp').description('Confidential MCP gateway').version('0.1.0');
program.exitOverride((err) => {
  process.exit(err.exitCode === 0 ? 0 : 2);
});

registerStartCommand(program);
registerVerifyCommand(program);
registerVerifyEvidenceCommand(program);
registerExecutionsCommand(program);
registerTpmCommand(program);
registerPolicyCommand(program);
registerCatalogCommand(program);
registerMeasureCommand(program);

program
  .command('token')
  .description('mint a random agent bearer token and print it with the SHA-256 to put in the config')
  .action(() => {
    const token = randomBytes(32).toString('base64url');
    process.stdout.write(
      `token:        ${token}\ntoken_sha256: ${createHash('sha256').update(token).digest('hex')}\n`,
    );
  });

await program.parseAsync(process.argv);
