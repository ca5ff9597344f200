#!/usr/bin/env node
/**
 * The `cmcp-verify` command line of the relying party: `cmcp-verify claim <claim> [--audit
 * <bundle>] …` and `cmcp-verify evidence --tpm-quote … | --snp-report … | --tdx-quote … |
 * --event-log …`, `cmcp-verify receipt <receipt> …` and `cmcp-verify consistency <checkpoint>… …`
 * (./transparency.ts), and `cmcp-verify tls https://host:port` (attested TLS). Exit codes: 0 verified (verdict not `invalid`, and at least `--require`,
 * default `hardware-attested`; for a claim, or signed by a key pinned with `--key`), 1 invalid or
 * not accepted, 2 unreadable input or usage error (one line on stderr, no stack trace).
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { registerVerifyCommand } from './claim.js';
import { registerVerifyEvidenceCommand } from './evidence.js';
import { registerVerifyTlsCommand } from './tls.js';
import { registerTransparencyCommands } from './transparency.js';

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

const program = new Command();
program
  .name('cmcp-verify')
  .description('Verify cmcp claims, audit bundles and raw TPM / SEV-SNP / TDX evidence offline')
  .version(pkg.version);
program.exitOverride((err) => {
  process.exit(err.exitCode === 0 ? 0 : 2);
});

registerVerifyCommand(program, 'claim');
registerVerifyEvidenceCommand(program, 'evidence');
registerTransparencyCommands(program, 'receipt', 'consistency');
registerVerifyTlsCommand(program, 'tls');

await program.parseAsync(process.argv);
