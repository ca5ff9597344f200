/**
 * `cmcp config …` (docs/configuration.md):
 *
 * - `config schema` — prints the configuration's JSON Schema (the committed
 *   docs/config.schema.json), for editors.
 * - `config explain --config FILE [--json]` — prints the effective configuration: every value
 *   with defaults filled in and where it came from (file, default, environment), secrets
 *   redacted (src/cli/config-explain.ts).
 *
 * Exit codes: 0 ok; 2 usage error, unreadable or invalid config (CONFIG_INVALID, as `cmcp start`).
 */
import type { Command } from 'commander';
import { ConfigError } from '../config/index.js';
import { configJsonSchemaText } from '../config/json-schema.js';
import { explainConfig, renderExplained } from './config-explain.js';

/** Adds the `config` command group to `program`. */
export function registerConfigCommand(program: Command): void {
  const cmd = program
    .command('config')
    .description('the configuration: its JSON Schema, the effective values');
  cmd
    .command('schema')
    .description('print the JSON Schema of the configuration file (docs/config.schema.json)')
    .action(() => {
      process.stdout.write(configJsonSchemaText());
    });
  cmd
    .command('explain')
    .description(
      'print the effective configuration: defaults filled in, where each value came from, secrets redacted',
    )
    .requiredOption('-c, --config <file>', 'YAML configuration file')
    .option('--json', 'one JSON array of {concern, path, value, source}')
    .action((o: { config: string; json?: boolean }) => {
      let values: ReturnType<typeof explainConfig>;
      try {
        values = explainConfig(o.config);
      } catch (e) {
        if (e instanceof ConfigError) {
          process.stderr.write(`cmcp: ${e.message}\n`);
          process.exit(2);
        }
        throw e;
      }
      process.stdout.write(o.json ? `${JSON.stringify(values, null, 2)}\n` : renderExplained(values));
    });
}
