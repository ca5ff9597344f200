/**
 * What a replica on PostgreSQL does not serve yet (docs/replicas.md, the status table), refused
 * with one stable code, POSTGRES_FEATURE_UNAVAILABLE, never served halfway or silently
 * answered otherwise: config sections at start-up and the console (the operator routes are
 * operator/'s: a policy reload is refused there). Also the metrics gauges a replica reads from PostgreSQL.
 */

import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { Gauge } from 'prom-client';
import type { GatewayConfig } from '../../config/index.js';
import { CmcpError } from '../../errors/index.js';
import type { GatewayMetrics } from '../../metrics/registry.js';
import { executionStates, openSessionsTotal } from '../../store/postgres/reads.js';
import { sendError } from '../edge/replies.js';

const CODE = 'POSTGRES_FEATURE_UNAVAILABLE';

/**
 * Refuses a config a replica cannot serve as configured (each would otherwise be ignored).
 * @throws CmcpError POSTGRES_FEATURE_UNAVAILABLE naming the section.
 */
export function assertReplicaConfig(cfg: GatewayConfig): void {
  const unserved: string[] = [];
  if (cfg.store.worker) unserved.push('store.worker (the SQLite store worker)');
  if (unserved.length)
    throw new CmcpError(
      CODE,
      `database is a postgres:// URL: a replica does not serve ${unserved.join(', ')} yet (docs/replicas.md); remove it or use a SQLite database`,
    );
}

/** The operator console's routes on a replica: refused before its login. */
export function refuseConsole(app: FastifyInstance): void {
  app.all('/operator/ui', (_req, reply) =>
    sendError(reply, CODE, 'the operator console is not served by a replica on PostgreSQL yet'),
  );
  app.all('/operator/ui/*', (_req, reply) =>
    sendError(reply, CODE, 'the operator console is not served by a replica on PostgreSQL yet'),
  );
}

/** `cmcp_open_sessions` and `cmcp_executions` read from the shared PostgreSQL at scrape time. */
export function replicaGauges(metrics: GatewayMetrics, pool: pg.Pool): void {
  const registers = [metrics.registry];
  new Gauge({
    name: 'cmcp_open_sessions',
    help: 'Sessions open now (default and named), on every replica',
    registers,
    async collect() {
      this.set(await openSessionsTotal(pool));
    },
  });
  new Gauge({
    name: 'cmcp_executions',
    help: 'Execution registry entries by state, on every replica',
    labelNames: ['state'],
    registers,
    async collect() {
      const rows = await executionStates(pool);
      this.reset();
      for (const s of ['in_flight', 'completed', 'not_attempted', 'outcome_unknown'])
        this.set({ state: s }, 0);
      for (const r of rows) this.set({ state: r.state }, r.n);
    },
  });
}
