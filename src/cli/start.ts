/**
 * `cmcp start --config FILE`: validate the config, start the gateway, stop gracefully on SIGINT/SIGTERM
 * (src/gateway/lifecycle/shutdown.ts: drain, record what did not drain, close sessions with claims, exit 0).
 * `--check` validates and reaches everything without starting (src/cli/check.ts).
 *
 * Exit codes: 2 invalid config; 3 attestation refused start-up (ATTESTATION_UNAVAILABLE,
 * ATTESTATION_TIER_TOO_LOW: the message names the provider and the reason); 4 a replica's
 * database unreachable or lost during its start (DATABASE_UNAVAILABLE: not retried here — the
 * supervisor starts it again with its own backoff; docs/replicas.md#the-database-going-away);
 * 1 any other start-up failure. `--check` exits with the same codes for what it finds
 * (src/cli/check.ts).
 */
import type { Command } from 'commander';
import pino from 'pino';
import { ConfigError, loadConfig } from '../config/index.js';
import { startGateway } from '../gateway/lifecycle/start.js';
import { DatabaseUnavailableError, isPostgresUrl } from '../store/migrations/index.js';
import { AttestationStartError } from '../tee/detect.js';
import { ATTESTATION_EXIT_CODE } from '../tee/tier.js';
import { DATABASE_EXIT_CODE, runStartCheck } from './check.js';

export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('start the gateway')
    .requiredOption('-c, --config <file>', 'YAML configuration file')
    .option('--check', 'validate the config and reach the attestation provider and every upstream, then exit')
    .action(async (opts: { config: string; check?: boolean }) => {
      if (opts.check) {
        const r = await runStartCheck(opts.config);
        (r.exitCode === 2 ? process.stderr : process.stdout).write(r.text);
        process.exit(r.exitCode);
      }
      const log = pino({ level: process.env.CMCP_LOG_LEVEL ?? 'info' });
      let cfg: ReturnType<typeof loadConfig>;
      try {
        cfg = loadConfig(opts.config);
      } catch (e) {
        if (e instanceof ConfigError) {
          process.stderr.write(`cmcp: ${e.message}\n`);
          process.exit(2);
        }
        throw e;
      }
      try {
        // The engine follows `database`: a file path is SQLite, a postgres:// URL a replica (docs/replicas.md).
        const gw = await startGateway(cfg, log);
        let stopping = false;
        const stop = async (signal: string) => {
          if (stopping) return;
          stopping = true;
          log.info({ signal, drain_ms: cfg.shutdown.drain_ms }, 'stopping: draining in-flight calls');
          try {
            const report = await gw.shutdown();
            log.info(report, 'stopped');
          } catch (e) {
            log.error({ err: (e as Error).message }, 'shutdown fault');
          }
          process.exit(0);
        };
        process.on('SIGINT', () => void stop('SIGINT'));
        process.on('SIGTERM', () => void stop('SIGTERM'));
      } catch (e) {
        const code = (e as { code?: string }).code;
        log.error({ err: (e as Error).message, code }, 'gateway failed to start');
        process.stderr.write(`cmcp: cannot start${code ? ` (${code})` : ''}: ${(e as Error).message}\n`);
        process.exit(
          e instanceof AttestationStartError
            ? ATTESTATION_EXIT_CODE
            : e instanceof DatabaseUnavailableError && isPostgresUrl(cfg.database)
              ? DATABASE_EXIT_CODE
              : 1,
        );
      }
    });
}
