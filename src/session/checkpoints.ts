/**
 * Signed tree heads of session chains (docs/spec/receipts.md): the gateway signs checkpoints of
 * each chain's Merkle tree with its gateway key, batched — a chain whose tree grew is signed at
 * the end of the window it grew in, once, however many entries were appended during it. A
 * chain is marked with {@link CheckpointSigner.touch} when an entry commits; a receipt that
 * finds no checkpoint covering its entry waits for the next window
 * ({@link CheckpointSigner.covering}). Checkpoints are stored (store/port.ts TreeStore) so
 * receipts and consistency proofs can be served later, by any process of the same database.
 */
import { type AuditEntry, signChainCheckpoint } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { CallStore, RelayEntrySink, StoredCheckpoint, TreeStore, WriteResults } from '../store/port.js';
import type { GatewayKey } from './types.js';

/** What signs one checkpoint: the tree head of a session chain, at `time`, as a signed note's text. */
export type CheckpointNoteSigner = (chainId: string, size: number, rootHex: string, time: string) => string;

/**
 * Checkpoints signed with the gateway key (C2SP tlog-checkpoint in a C2SP signed note, key name
 * the session's origin: docs/spec/transparency.md#checkpoints).
 */
export function gatewayNoteSigner(key: GatewayKey): CheckpointNoteSigner {
  return (chainId, size, rootHex, time) =>
    signChainCheckpoint({ chain_id: chainId, size, root: Buffer.from(rootHex, 'hex'), time }, key.privateKey);
}

/** Chains whose newest signed size this process remembers at once (then it starts over). */
const MAX_REMEMBERED = 10_000;

interface Waiter {
  leafIndex: number;
  resolve: (c: StoredCheckpoint) => void;
  reject: (e: unknown) => void;
}

export class CheckpointSigner {
  /** Chains touched in the current window. */
  private dirty = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  /** Per chain: the receipts waiting for a checkpoint that covers their leaf. */
  private readonly waiting = new Map<string, Waiter[]>();
  /** Per chain: the size of the newest checkpoint this process knows is stored. */
  private readonly signedSize = new Map<string, number>();
  private running: Promise<void> = Promise.resolve();
  private stopped = false;
  /** Checkpoints signed by this process (the bench's signatures per second). */
  signatures = 0;

  /**
   * @param windowMs the batching window: at most one signature per chain per window.
   * @param sign makes a checkpoint's signed note with the gateway key.
   */
  constructor(
    private readonly store: TreeStore,
    private readonly sign: CheckpointNoteSigner,
    private readonly windowMs: number,
    private readonly log: Logger,
  ) {}

  /** Marks `chainId` as grown: it is signed when the current window ends. */
  touch(chainId: string): void {
    if (this.stopped) return;
    this.dirty.add(chainId);
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.running.then(() => this.flush());
    }, this.windowMs);
    this.timer.unref();
  }

  /**
   * The oldest stored checkpoint of `chainId` whose tree holds leaf `leafIndex`; when none is
   * stored yet, the one the next window signs.
   * @throws (rejects) the store's errors; Error when the signer is stopped before one is signed.
   */
  async covering(chainId: string, leafIndex: number): Promise<StoredCheckpoint> {
    const stored = await this.store.checkpointCovering(chainId, leafIndex);
    if (stored) return stored;
    return new Promise((resolve, reject) => {
      if (this.stopped) return reject(new Error('the checkpoint signer is stopped'));
      const list = this.waiting.get(chainId) ?? [];
      list.push({ leafIndex, resolve, reject });
      this.waiting.set(chainId, list);
      this.touch(chainId);
    });
  }

  /** Signs what is pending now and stops; later touches sign nothing. */
  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.running = this.running.then(() => this.flush());
    await this.running;
    this.stopped = true;
    for (const list of this.waiting.values())
      for (const w of list) w.reject(new Error('the checkpoint signer is stopped'));
    this.waiting.clear();
  }

  /** Signs one checkpoint per touched chain whose tree grew since its newest checkpoint. */
  private async flush(): Promise<void> {
    const chains = this.dirty;
    this.dirty = new Set();
    for (const chainId of chains) {
      try {
        const cp = await this.checkpoint(chainId);
        this.settle(chainId, cp);
      } catch (e) {
        this.log.error({ chain_id: chainId, err: (e as Error).message }, 'checkpoint not signed');
        const list = this.waiting.get(chainId) ?? [];
        this.waiting.delete(chainId);
        for (const w of list) w.reject(e);
      }
    }
  }

  /** The checkpoint of the chain's tree head now: signed and stored, or the stored one of that size. */
  private async checkpoint(chainId: string): Promise<StoredCheckpoint | undefined> {
    const head = await this.store.treeHead(chainId);
    if (!head) return undefined;
    const known = this.signedSize.get(chainId);
    if (known !== undefined && known >= head.size)
      return this.store.checkpointCovering(chainId, head.size - 1);
    const signedAt = new Date().toISOString();
    const cp: StoredCheckpoint = {
      chain_id: chainId,
      tree_size: head.size,
      root_hash: head.root,
      note: this.sign(chainId, head.size, head.root, signedAt),
      signed_at: signedAt,
    };
    this.signatures++;
    const stored = await this.store.recordCheckpoint(cp);
    if (this.signedSize.size >= MAX_REMEMBERED) this.signedSize.clear();
    this.signedSize.set(chainId, stored.tree_size);
    return stored;
  }

  /** Answers the chain's waiters that `cp` covers; the others wait for the next window. */
  private settle(chainId: string, cp: StoredCheckpoint | undefined): void {
    const list = this.waiting.get(chainId);
    if (!list) return;
    const left = list.filter((w) => !cp || w.leafIndex >= cp.tree_size);
    for (const w of list) if (cp && w.leafIndex < cp.tree_size) w.resolve(cp);
    if (left.length === 0) this.waiting.delete(chainId);
    else {
      this.waiting.set(chainId, left);
      this.touch(chainId);
    }
  }
}

/** The entry a write command committed, if any. */
function committedEntry(result: WriteResults[keyof WriteResults]): AuditEntry | undefined {
  if (result === null) return undefined;
  if ('entry_hash' in result) return result;
  return result.kind === 'refused' ? result.entry : undefined;
}

/** Marks a committed session-chain entry's chain for the next checkpoint. */
function touchSessionChain(signer: CheckpointSigner, e: AuditEntry | undefined): void {
  if (e && e.session_id !== null && e.chain_id === e.session_id) signer.touch(e.chain_id);
}

/** `store` whose committed session-chain entries are signed in the window they commit in. */
export function checkpointedWrites(store: CallStore, signer: CheckpointSigner): CallStore {
  return {
    async write(cmd) {
      const result = await store.write(cmd);
      touchSessionChain(signer, committedEntry(result));
      return result;
    },
    closeAttempts: () => store.closeAttempts(),
    attemptOpen: (callId) => store.attemptOpen(callId),
  };
}

/** `sink` whose committed session-chain entries are signed in the window they commit in. */
export function checkpointedRelayEntries(sink: RelayEntrySink, signer: CheckpointSigner): RelayEntrySink {
  return async (sessionId, input) => {
    const e = await sink(sessionId, input);
    touchSessionChain(signer, e);
    return e;
  };
}
