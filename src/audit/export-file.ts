/**
 * An export file as its own resume point (docs/audit-export.md#resuming): the cursor of its last
 * complete line. A line cut short by a crash is cut off first, so the export written after it
 * continues with exactly the next entry: no gap, no duplicate.
 */
import { closeSync, existsSync, fstatSync, ftruncateSync, openSync, readSync } from 'node:fs';

const CHUNK = 64 * 1024;

/** The cursor a `cmcp` or `ocsf` line carries. */
function cursorOf(line: string): string | null {
  const v = JSON.parse(line) as { cursor?: unknown; unmapped?: { cmcp?: { cursor?: unknown } } };
  const c = v.cursor ?? v.unmapped?.cmcp?.cursor;
  return typeof c === 'string' ? c : null;
}

/**
 * Cuts `path` after its last newline (a partial last line is dropped) and returns the cursor
 * of its last complete line; null when the file is absent or holds no complete line.
 * @throws Error when the last complete line is not an export line (not JSON, or no cursor).
 */
export function resumeExportFile(path: string): string | null {
  if (!existsSync(path)) return null;
  const fd = openSync(path, 'r+');
  try {
    const size = fstatSync(fd).size;
    // Read backwards until the last line's start: the newline before the last newline.
    let tail = Buffer.alloc(0);
    let pos = size;
    let end = -1;
    for (;;) {
      end = tail.lastIndexOf(0x0a);
      const start = end > 0 ? tail.lastIndexOf(0x0a, end - 1) : -1;
      if ((end >= 0 && start >= 0) || pos === 0) break;
      const n = Math.min(CHUNK, pos);
      pos -= n;
      const chunk = Buffer.alloc(n);
      readSync(fd, chunk, 0, n, pos);
      tail = Buffer.concat([chunk, tail]);
    }
    if (end < 0) {
      ftruncateSync(fd, 0);
      return null;
    }
    if (pos + end + 1 < size) ftruncateSync(fd, pos + end + 1);
    const start = end > 0 ? tail.lastIndexOf(0x0a, end - 1) : -1;
    const line = tail.subarray(start + 1, end).toString('utf8');
    const cursor = cursorOf(line);
    if (cursor === null) throw new Error(`${path}: its last line carries no export cursor`);
    return cursor;
  } finally {
    closeSync(fd);
  }
}
