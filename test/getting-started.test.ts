/**
 * docs/getting-started.md cannot rot (docs/getting-started.md): every fenced code block is extracted and
 * run in order, in one bash session started in the repository root, as a reader types them:
 * ```sh blocks are sourced (`set -euo pipefail`: any failing command fails the test), blocks with
 * `title=FILE` are written to FILE in the session's current folder. Any other block fails the
 * test, so every block is accounted for. Real swtpm, real MCP servers (server-everything over
 * stdio, the guide's own Streamable HTTP server), the built `cmcp` (dist/).
 *
 * The only change made to the text: the guide's ports (2321/2322, 8787, 9000) are replaced by
 * free loopback ports, as the guide tells readers to do when one is taken. Everything the
 * session starts shares its process group, which is ended at the end; its files live under a
 * TMPDIR of the test's own.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, REPO_ROOT } from './harness/gateway.js';

interface Block {
  lang: string;
  title: string | null;
  body: string;
  line: number;
}

/** Every fenced block of a Markdown text, with its info string split into language and title. */
function fencedBlocks(md: string): Block[] {
  const out: Block[] = [];
  const re = /^```([^\n]*)\n([\s\S]*?)^```\s*$/gm;
  for (let m = re.exec(md); m; m = re.exec(md)) {
    const info = (m[1] ?? '').trim();
    const [lang = '', ...attrs] = info.split(/\s+/);
    const title = attrs.find((a) => a.startsWith('title='))?.slice('title='.length) ?? null;
    out.push({ lang, title, body: m[2] ?? '', line: md.slice(0, m.index).split('\n').length });
  }
  return out;
}

function portFree(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const s = createServer();
    s.once('error', () => ok(false));
    s.listen({ host: '127.0.0.1', port, exclusive: true }, () => s.close(() => ok(true)));
  });
}

/** P such that P and P+1 are free on 127.0.0.1 (swtpm's server and control ports). */
async function freePortPair(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const p = await freePort();
    if (p < 65535 && (await portFree(p + 1))) return p;
  }
  throw new Error('no two consecutive free ports');
}

/** One bash session fed blocks on stdin; resolves per block, rejects when the shell exits. */
class Session {
  private out = '';
  private exited: number | null = null;
  private waiters: (() => void)[] = [];
  readonly proc: ChildProcess;

  constructor(cwd: string, env: NodeJS.ProcessEnv) {
    this.proc = spawn('bash', ['--noprofile', '--norc'], {
      cwd,
      env,
      detached: true, // its own process group: everything the guide starts in the background
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const take = (d: Buffer) => {
      this.out += d.toString('utf8');
      for (const w of this.waiters.splice(0)) w();
    };
    this.proc.stdout?.on('data', take);
    this.proc.stderr?.on('data', take);
    this.proc.on('exit', (code, signal) => {
      this.exited = code ?? (signal ? 128 : 1);
      for (const w of this.waiters.splice(0)) w();
    });
    this.proc.stdin?.write('set -euo pipefail\n');
  }

  get output(): string {
    return this.out;
  }

  /** Sources `file` in the session; resolves with the output of this block. */
  async run(file: string, marker: string, timeoutMs: number): Promise<string> {
    const start = this.out.length;
    this.proc.stdin?.write(`source ${JSON.stringify(file)}\necho ${marker}\n`);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.out.indexOf(marker, start);
      if (i >= 0) return this.out.slice(start, i);
      if (this.exited !== null)
        throw new Error(`the shell exited (${this.exited}):\n${this.out.slice(start)}`);
      if (Date.now() > deadline)
        throw new Error(`timed out after ${timeoutMs} ms:\n${this.out.slice(start)}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 200);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Ends the session's process group (the shell and everything it started). */
  async stop(): Promise<void> {
    const pgid = this.proc.pid;
    if (pgid === undefined) return;
    for (const sig of ['SIGTERM', 'SIGKILL'] as const) {
      try {
        process.kill(-pgid, sig);
      } catch {
        return; // the group is gone
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

const GUIDE = join(REPO_ROOT, 'docs', 'getting-started.md');
const root = mkdtempSync(join(tmpdir(), 'cmcp-guide-'));
let session: Session | null = null;
afterAll(async () => {
  await session?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe('docs/getting-started.md', () => {
  const blocks = fencedBlocks(readFileSync(GUIDE, 'utf8'));

  it('has runnable blocks only: sh, or a file with a title', () => {
    expect(blocks.length).toBeGreaterThan(10);
    // Every fence in the guide opens or closes a block that runs: an indented, `~~~` or
    // unterminated block (which the run would skip) fails here.
    const fences = readFileSync(GUIDE, 'utf8')
      .split('\n')
      .filter((l) => /^\s*(```|~~~)/.test(l));
    expect(fences.length, 'fence lines vs blocks run').toBe(2 * blocks.length);
    for (const b of blocks) expect(b.lang === 'sh' || b.title !== null, `block at line ${b.line}`).toBe(true);
  });

  it('runs every block in order, as written', { timeout: 600_000 }, async () => {
    const tpm = await freePortPair();
    const ports: Record<string, number> = {
      '2321': tpm,
      '2322': tpm + 1,
      '8787': await freePort(),
      '9000': await freePort(),
    };
    const withPorts = (s: string) => s.replace(/\b(2321|2322|8787|9000)\b/g, (p) => String(ports[p]));
    const tmp = join(root, 'tmp');
    const scripts = join(root, 'blocks');
    mkdirSync(tmp);
    mkdirSync(scripts);
    session = new Session(REPO_ROOT, { ...process.env, TMPDIR: tmp });
    for (const [i, b] of blocks.entries()) {
      const file = join(scripts, `${String(i).padStart(2, '0')}.sh`);
      const body = withPorts(b.body);
      writeFileSync(
        file,
        b.lang === 'sh'
          ? body
          : `cat > ${JSON.stringify(b.title)} <<'CMCP_GUIDE_EOF'\n${body}CMCP_GUIDE_EOF\n`,
      );
      try {
        await session.run(file, `::cmcp-guide-block-${i}-done::`, 180_000);
      } catch (e) {
        throw new Error(
          `docs/getting-started.md block at line ${b.line} (${b.lang}${b.title ? ` ${b.title}` : ''}) failed: ${(e as Error).message}`,
        );
      }
    }
    // The guide's own checks ran (each fails its block otherwise); these are what a reader sees.
    const out = session.output;
    if (process.env.CMCP_GUIDE_TRANSCRIPT) writeFileSync(process.env.CMCP_GUIDE_TRANSCRIPT, out);
    expect(out).toMatch(/binding bound \(tpm\)/);
    expect(out).toMatch(/verdict\W+hardware-attested/i);
    // The agent's own receipt: fetched from the receipts route, checked offline with the claim
    // (bound to the TPM quote) and with the pinned gateway key alone.
    expect(out).toMatch(/receipt: leaf \d+, entry [0-9a-f]{16}/);
    expect(out).toContain('receipt: hardware-attested');
    expect(out).toContain('receipt with the pinned key: signed-only');
    expect(out).toContain('curl session: hardware-attested');
    expect(out).toMatch(/"error_code":"INVALID_REQUEST".*unknown member \\"chalenge\\"/);
    // The catalog and the policy decide: a hand-written forbid refuses a call, naming its rule;
    // after a signed reload the same call is allowed; the claim is pinned to both hashes; a
    // tool changed upstream is refused.
    expect(out).toMatch(/wrote \d+ tool pin\(s\) to catalog\.json/);
    expect(out).toMatch(/\d+ tool\(s\) permitted, from the catalog/);
    expect(out).toContain('refused: POLICY_DENY by ["no-secret-notes"]');
    expect(out).toMatch(/"version":2,"previous_bundle_hash":"sha256:[0-9a-f]{64}","previous_version":1/);
    expect(out).toMatch(/allowed: \d+ note\(s\)/);
    expect(out).toContain('note session: hardware-attested, policy and catalog pinned');
    expect(out).toMatch(/"error_code":"CATALOG_DRIFT"/);
  });
});
