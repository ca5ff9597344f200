/** `cmcp start --config FILE`: validate the config, start the gateway, stop cleanly on SIGINT/SIGTERM. */
import type { Command } from 'commander';
import pino from 'pino';
import { ConfigError, loadConfig } from '../config/index.js';
import { startGateway } from '../gateway/runtime.js';

export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('start the gateway')
    .requiredOption('-c, --config <file>', 'YAML configuration file')
    .action(async (opts: { config: string }) => {
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
        const gw = await startGateway(cfg, log);
        let stopping = false;
        const stop = async (signal: string) => {
          if (stopping) return;
          stopping = true;
          log.info({ signal }, 'stopping');
          await gw.close();
          process.exit(0);
        };
        process.on('SIGINT', () => void stop('SIGINT'));
        process.on('SIGTERM', () => void stop('SIGTERM'));
      } catch (e) {
        log.error(
          { err: (e as Error).message, code: (e as { code?: string }).code },
          'gateway failed to start',
        );
        process.stderr.write(`cmcp: cannot start: ${(e as Error).message}\n`);
        process.exit(1);
      }
    });
}
