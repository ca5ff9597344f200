// The worker of testing/tpm-latency-proxy.ts. Worker threads load it without vitest's transform
// (under Node 24 as TypeScript with erasable types only, from dist/ as compiled JS).
// A TCP relay in front of swtpm's command and control ports that holds each TPM2_Quote command
// for `delayMs` before passing it on, so the quote takes as long as on a slow hardware TPM while
// every other command is unchanged. It runs on its own thread: a caller whose event loop is
// blocked in a synchronous quote still gets its answer (after the delay), as from a real TPM.
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';

const { targetPort, delayMs, host } = workerData as { targetPort: number; delayMs: number; host: string };
/** TPM_CC_Quote (TPM 2.0 Part 2 §6.5.2). */
const TPM_CC_QUOTE = 0x158;

/** Relays one client connection to `port`; when `frame`, client bytes are cut into TPM commands. */
function relay(client: Socket, port: number, frame: boolean): void {
  const server = createConnection({ host, port });
  let pending = Buffer.alloc(0);
  let chain = Promise.resolve();
  const toServer = (buf: Buffer) => {
    chain = chain.then(() => {
      if (!server.destroyed) server.write(buf);
    });
  };
  client.on('data', (chunk: Buffer) => {
    if (!frame) return toServer(chunk);
    pending = Buffer.concat([pending, chunk]);
    // TPM command header: tag (2), commandSize (4), commandCode (4), big-endian (Part 1 §18).
    while (pending.length >= 10) {
      const size = pending.readUInt32BE(2);
      if (size < 10 || pending.length < size) break;
      const cmd = pending.subarray(0, size);
      pending = pending.subarray(size);
      if (cmd.readUInt32BE(6) === TPM_CC_QUOTE) {
        chain = chain.then(() => new Promise<void>((ok) => setTimeout(ok, delayMs)));
      }
      toServer(Buffer.from(cmd));
    }
  });
  server.on('data', (d: Buffer) => client.write(d));
  const end = () => {
    client.destroy();
    server.destroy();
  };
  client.on('error', end);
  server.on('error', end);
  client.on('close', end);
  server.on('close', end);
}

function listen(port: number, onConn: (c: Socket) => void): Promise<Server | null> {
  return new Promise((ok) => {
    const srv = createServer(onConn);
    srv.once('error', () => ok(null));
    srv.listen({ host, port, exclusive: true }, () => ok(srv));
  });
}

// swtpm's TCTI reaches the control channel at port + 1: take two consecutive ports.
for (let i = 0; i < 50; i++) {
  const cmd = await listen(0, (c) => relay(c, targetPort, true));
  if (!cmd) continue;
  const port = (cmd.address() as { port: number }).port;
  const ctrl = await listen(port + 1, (c) => relay(c, targetPort + 1, false));
  if (ctrl) {
    parentPort?.on('message', (m: unknown) => {
      if (m === 'stop') {
        cmd.close();
        ctrl.close();
        parentPort?.close();
      }
    });
    parentPort?.postMessage({ port });
    break;
  }
  cmd.close();
}
