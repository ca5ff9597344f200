/**
 * A plain TCP relay on 127.0.0.1 (the comparison's floor for "one more hop"): every accepted
 * connection is piped byte for byte to `127.0.0.1:<target port>`. No parsing, no buffering
 * beyond the sockets'.
 *
 * Usage: `node dist/bench/compare/tcp-relay.js <target port>`; prints `listening <port>`.
 */
import { connect, createServer } from 'node:net';

const target = Number(process.argv[2]);
const relay = createServer((inbound) => {
  const outbound = connect(target, '127.0.0.1');
  inbound.setNoDelay(true);
  outbound.setNoDelay(true);
  inbound.pipe(outbound).pipe(inbound);
  const end = () => {
    inbound.destroy();
    outbound.destroy();
  };
  inbound.on('error', end);
  outbound.on('error', end);
  inbound.on('close', end);
  outbound.on('close', end);
});
relay.listen(0, '127.0.0.1', () => {
  const a = relay.address();
  process.stdout.write(`listening ${typeof a === 'object' && a ? a.port : 0}\n`);
});
process.on('SIGTERM', () => process.exit(0));
