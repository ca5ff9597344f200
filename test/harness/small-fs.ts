/**
 * A small real filesystem for full-disk tests: a tmpfs mounted on a fresh folder (root only;
 * a container without CAP_SYS_ADMIN refuses the mount, and the tests that need it say so and
 * skip). `fill()` writes a ballast file until the filesystem answers ENOSPC; `unfill()` removes
 * it, so writes succeed again.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SmallFs {
  dir: string;
  /** Writes ballast until ENOSPC (bounded by the filesystem's size). */
  fill(): void;
  /** Removes the ballast. */
  unfill(): void;
  /** Unmounts and removes the folder. */
  close(): void;
}

/** Why a tmpfs cannot be mounted here, or null when it can (tried once, on a scratch folder). */
export function smallFsUnavailable(): string | null {
  if (process.platform !== 'linux') return 'tmpfs mounts are Linux only';
  if (process.getuid?.() !== 0) return 'mounting a tmpfs needs root';
  try {
    mountSmallFs(1 << 20).close();
    return null;
  } catch (e) {
    return `cannot mount a tmpfs: ${(e as Error).message.split('\n')[0]}`;
  }
}

/** Mounts a tmpfs of `bytes` on a fresh folder. @throws when mount(8) fails. */
export function mountSmallFs(bytes: number): SmallFs {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-smallfs-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const ballast = join(dir, 'ballast');
  return {
    dir,
    fill() {
      const fd = openSync(ballast, 'a');
      const chunk = Buffer.alloc(64 * 1024);
      try {
        // At most the filesystem's size in chunks, then ENOSPC ends it.
        for (let i = 0; i <= bytes / chunk.length + 1; i++) writeSync(fd, chunk);
      } catch (e) {
        if ((e as { code?: string }).code !== 'ENOSPC') throw e;
      } finally {
        closeSync(fd);
      }
      // The last partial pages as well.
      const small = openSync(ballast, 'a');
      try {
        for (let i = 0; i < 64; i++) writeSync(small, Buffer.alloc(1024));
      } catch (e) {
        if ((e as { code?: string }).code !== 'ENOSPC') throw e;
      } finally {
        closeSync(small);
      }
    },
    unfill() {
      unlinkSync(ballast);
    },
    close() {
      try {
        execFileSync('umount', ['-l', dir], { stdio: 'pipe' });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
