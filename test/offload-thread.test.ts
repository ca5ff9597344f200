/**
 * src/offload/thread.ts on real worker threads: the one bound (STORE_QUEUE_FULL for bounded
 * requests only), a thread's error code carried to the caller, a stuck thread terminated with
 * its owed answers failed, and a clean stop that waits for the answers owed.
 */
import { CmcpError } from '@cmcp/verify/errors';
import { describe, expect, it } from 'vitest';
import { OffloadThread, ThreadFailed } from '../src/offload/thread.js';

type Job = { waitMs?: number; failCode?: string; value?: unknown; hang?: true };

/** A thread that answers each job after `waitMs`, fails it with `failCode`, or never answers. */
function jobLoop(): void {
  const { parentPort } = require('node:worker_threads');
  parentPort.on('message', (m: { id: number; body: Job } | { stop: true }) => {
    if ('stop' in m) return parentPort.close();
    const { body } = m;
    if (body.hang) return;
    setTimeout(() => {
      if (body.failCode)
        parentPort.postMessage({ id: m.id, ok: false, error: { message: 'refused', code: body.failCode } });
      else parentPort.postMessage({ id: m.id, ok: true, value: body.value });
    }, body.waitMs ?? 0);
  });
}

describe('an offload thread', () => {
  it('refuses bounded requests past its bound with STORE_QUEUE_FULL; unbounded ones still go', async () => {
    const t = new OffloadThread<Job>({ fn: jobLoop }, { name: 'the test thread', maxQueued: 2 });
    const first = [t.request({ waitMs: 200, value: 1 }, true), t.request({ waitMs: 200, value: 2 }, true)];
    const refused = t.request({ value: 3 }, true);
    await expect(refused).rejects.toBeInstanceOf(CmcpError);
    await expect(refused).rejects.toMatchObject({ code: 'STORE_QUEUE_FULL' });
    const unbounded = t.request({ value: 4 });
    expect(t.queued).toBe(3);
    expect(await Promise.all([...first, unbounded])).toEqual([1, 2, 4]);
    expect(await t.request({ value: 5 }, true)).toBe(5); // room again once answered
    await t.close();
  });

  it("carries the thread's error code to the caller", async () => {
    const t = new OffloadThread<Job>({ fn: jobLoop }, { name: 'the test thread' });
    await expect(t.request({ failCode: 'SOME_CODE' })).rejects.toMatchObject({
      message: 'refused',
      code: 'SOME_CODE',
    });
    await t.close();
  });

  it('terminates a thread that does not answer in time: its owed answers fail, later requests too', async () => {
    const t = new OffloadThread<Job>({ fn: jobLoop }, { name: 'the test thread', answerTimeoutMs: 300 });
    const hung = t.request({ hang: true });
    const behind = t.request({ waitMs: 10_000, value: 1 });
    await expect(hung).rejects.toBeInstanceOf(ThreadFailed);
    await expect(behind).rejects.toBeInstanceOf(ThreadFailed);
    expect(t.failed).toBeInstanceOf(ThreadFailed);
    await expect(t.request({ value: 2 })).rejects.toBeInstanceOf(ThreadFailed);
  });

  it('closes once every owed answer is in, and refuses requests after that', async () => {
    const t = new OffloadThread<Job>({ fn: jobLoop }, { name: 'the test thread' });
    const owed = t.request({ waitMs: 200, value: 'late' });
    await t.close();
    expect(await owed).toBe('late');
    await expect(t.request({ value: 1 })).rejects.toThrow(/the test thread is closed/);
  });
});
