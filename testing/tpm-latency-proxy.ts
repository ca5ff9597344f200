/**
 * A slow TPM for tests and the bench: a relay in front of an swtpm that holds every TPM2_Quote
 * for a fixed delay (e.g. 50 ms, a hardware TPM's signing time), on its own worker thread, so a
 * quote takes that long whatever thread issues it. Reached through its own TCTI string; nothing
 * in src/ can name it (testing/ is never imported by src/, native/ or packages/).
 */
import { Worker } from 'node:worker_threads';

export interface TpmLatencyProxy {
  /** tctildr configuration of the slow TPM. */
  tcti: string;
  stop(): Promise<void>;
}

/**
 * Starts the relay in front of the swtpm whose command port is `targetPort` (control port + 1).
 * @param delayMs how long each TPM2_Quote command is held, milliseconds.
 */
export async function startTpmLatencyProxy(targetPort: number, delayMs: number): Promise<TpmLatencyProxy> {
  const host = '127.0.0.1';
  // The worker runs as the .ts source under vitest (Node 24 strips its types) and as .js from dist/.
  const ext = import.meta.url.endsWith('.ts') ? 'ts' : 'js';
  const worker = new Worker(new URL(`./tpm-latency-proxy.worker.${ext}`, import.meta.url), {
    workerData: { targetPort, delayMs, host },
  });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', (m: { port: number }) => resolve(m.port));
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`latency proxy exited (${code}) before listening`)));
  });
  return {
    tcti: `swtpm:host=${host},port=${port}`,
    async stop() {
      worker.postMessage('stop');
      await worker.terminate();
    },
  };
}
