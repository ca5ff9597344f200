#!/usr/bin/env node
import {
  registerTransparencyCommands,
  registerVerifyCommand,
  registerVerifyEvidenceCommand,
  registerVerifyTlsCommand,
} from '@cmcp/verify/cli';
/**
 * The `cmcp` command line. Usage errors and bad input print one clear line and exit 2;
 * `verify` exits 1 when the verdict is `invalid`, or when the claim is neither
 * hardware-attested nor signed by a pinned `--key` (unless `--require` lowers the bar);
 * `start` (and `start --check`, for the same config) exits 3 when attestation refuses start-up.
 */
import { Command, Help, type Option } from 'commander';
import { registerAuditCommand } from './audit.js';
import { registerCatalogCommand } from './catalog.js';
import { registerConfigCommand } from './config.js';
import { registerDbCommand } from './db.js';
import { registerExecutionsCommand } from './executions.js';
import { registerMeasureCommand } from './measure.js';
import { registerPolicyCommand } from './policy.js';
import { registerStartCommand } from './start.js';
import { registerTokenCommand } from './token.js';
import { registerTpmCommand } from './tpm.js';
import { addExpectRelease } from './verify-release.js';

const program = new Command();
program.name('cmcp').description('Confidential MCP gateway').version('0.1.0');
program.exitOverride((err) => {
  process.exit(err.exitCode === 0 ? 0 : 2);
});
// `--help` marks the options a command cannot run without (inherited by every subcommand).
program.configureHelp({
  optionDescription(this: Help, option: Option) {
    const text = Help.prototype.optionDescription.call(this, option);
    return option.mandatory ? `${text} (required)` : text;
  },
});

registerStartCommand(program);
registerConfigCommand(program);
// The relying party's commands, defined once in @cmcp/verify (there: `cmcp-verify claim|evidence|receipt|consistency`).
// `cmcp verify` adds --expect-release (a release artifact's measurement) to the relying party's command.
addExpectRelease(registerVerifyCommand(program, 'verify'), 'cmcp verify');
registerVerifyEvidenceCommand(program, 'verify-evidence');
registerTransparencyCommands(program, 'verify-receipt', 'verify-consistency');
registerVerifyTlsCommand(program, 'verify-tls');
registerExecutionsCommand(program);
registerTpmCommand(program);
registerPolicyCommand(program);
registerCatalogCommand(program);
registerTokenCommand(program);
registerMeasureCommand(program);
registerDbCommand(program);
registerAuditCommand(program);

await program.parseAsync(process.argv);
