/**
 * `cmcp token [--operator]`: mints a random bearer token (32 bytes, base64url) and prints it with
 * its SHA-256, which is what the config holds (`agents[].token_sha256` or, with `--operator`,
 * `operators[].token_sha256`). The two kinds are never interchangeable: an agent token is refused
 * on /operator/* and an operator token on agent routes.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Command } from 'commander';

/** The printed lines: `token:`, `token_sha256:` and `kind:` (what to do with it). */
export function mintToken(operator: boolean): string {
  const token = randomBytes(32).toString('base64url');
  const kind = operator
    ? 'operator (put token_sha256 under operators: with an operator_id; accepted on /operator/* only)'
    : 'agent (put token_sha256 under agents: with an agent_id; accepted on agent routes only)';
  return `token:        ${token}\ntoken_sha256: ${createHash('sha256').update(token).digest('hex')}\nkind:         ${kind}\n`;
}

export function registerTokenCommand(program: Command): void {
  program
    .command('token')
    .description('mint a random bearer token and print it with the SHA-256 to put in the config')
    .option('--operator', 'an operator token (for operators: and /operator/*) instead of an agent token')
    .action((opts: { operator?: boolean }) => {
      process.stdout.write(mintToken(!!opts.operator));
    });
}
