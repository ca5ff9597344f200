/**
 * `cmcp catalog …` (docs/spec/policy.md#catalog; docs/policy.md):
 *
 * - `catalog snapshot --config FILE [--out FILE] [--description TEXT]` — connects to every
 *   configured upstream, lists its tools and writes a catalog pinning each one exactly as
 *   listed now (sensitivity `unclassified`). Review it: set sensitivities, delete tools that
 *   must not be callable; then point `catalog.file` at it.
 * - `catalog hash FILE` — validates a catalog and prints its hash.
 *
 * Exit codes: 0 ok; 1 invalid catalog or unreachable upstream; 2 usage or unreadable input.
 */
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import pino from 'pino';
import { CatalogError, loadCatalogFile, snapshotCatalog } from '../catalog/catalog.js';
import { ConfigError, loadConfig } from '../config/index.js';
import { listUpstreamToolsOnce } from '../upstream/pool.js';

function die(code: number, msg: string): never {
  process.stderr.write(`cmcp catalog: ${msg.slice(0, 4000)}\n`);
  process.exit(code);
}

/** Adds the `catalog` command group to `program`. */
export function registerCatalogCommand(program: Command): void {
  const cmd = program.command('catalog').description('tool catalogs: snapshot, hash');
  cmd
    .command('snapshot')
    .description('write a catalog pinning every tool the configured upstreams list now')
    .requiredOption('-c, --config <file>', 'gateway YAML configuration')
    .option('--out <file>', 'write here instead of stdout')
    .option('--description <text>', 'catalog description')
    .action(async (o: { config: string; out?: string; description?: string }) => {
      let cfg: ReturnType<typeof loadConfig>;
      try {
        cfg = loadConfig(o.config);
      } catch (e) {
        if (e instanceof ConfigError) die(2, e.message);
        throw e;
      }
      const lists = await listUpstreamToolsOnce(cfg.upstreams, pino({ level: 'silent' })).catch((e: Error) =>
        die(1, e.message),
      );
      const doc = snapshotCatalog(lists, o.description);
      const text = `${JSON.stringify(doc, null, 2)}\n`;
      if (o.out) {
        try {
          writeFileSync(o.out, text);
        } catch (e) {
          die(2, `cannot write ${o.out} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
        }
        process.stderr.write(`wrote ${doc.tools.length} tool pin(s) to ${o.out}\n`);
      } else process.stdout.write(text);
      process.exit(0);
    });
  cmd
    .command('hash')
    .description('validate a catalog file and print its hash')
    .argument('<file>')
    .action((file: string) => {
      try {
        process.stdout.write(`${loadCatalogFile(file).hash}\n`);
      } catch (e) {
        // An invalid catalog is invalid input, exit 2 as `policy hash` and `verify` use it.
        if (e instanceof CatalogError) die(2, e.message);
        throw e;
      }
    });
}
