/**
 * Upstream credentials never reach an agent: two real upstream processes
 * (test/fixtures/echo-secrets-server.mjs) echo the credentials they were given — an HTTPS
 * upstream what each request carried (a bearer token from an environment variable, an API key
 * and a Basic value from files, the mTLS client certificate) and the client key file; a stdio
 * upstream its configured env token and the HTTP upstream's credentials — as is, base64,
 * base64url, percent-encoded, inside `user:…` base64 and escaped inside JSON text, in a tool
 * description, a result, a JSON-RPC error (message and data), a log and a progress notification
 * and a sampling request. The agent (the gateway's MCP handler with a client channel, as the
 * HTTP edge calls it) receives each of them with `[redacted]` in place of every form, and the
 * log output, the database and the audit entries hold none; the recorded result digest is that
 * of the result the agent received.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jcsDigest } from '@cmcp/verify/formats';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import type { ClientChannel, ClientMessage } from '../src/relay/channel.js';
import { envSecrets, SECRET_ENV_NAME, urlSecrets } from '../src/upstream/credentials.js';
import { describeUpstreamFailure } from '../src/upstream/diagnose.js';
import { MIN_SECRET_CHARS, pemForms, REDACTED, Redactor, secretForms } from '../src/upstream/redact.js';
import { makeTlsPki, type TlsPki } from '../testing/tls-pki.js';
import { cleanup, REPO_ROOT, type TestConfig, writeConfig } from './harness/gateway.js';

const FIXTURE = join(REPO_ROOT, 'test', 'fixtures', 'echo-secrets-server.mjs');
// Characters that JSON escapes and percent-encoding changes, so that those forms differ.
const TOKEN = `tok/${randomUUID()}+"q"\\=!*'()`;
const API_KEY = `key-${randomUUID()}`;
const PASSWORD = `pw-${randomUUID()}`;
const BASIC = Buffer.from(`svc-user:${PASSWORD}`).toString('base64');
const STDIO_TOKEN = `stdio-${randomUUID()}`;
/** In the HTTP upstream's url (`?api_key=`), a stdio upstream's DATABASE_URL, an env entry marked secret. */
const URL_KEY = `uk-${randomUUID()}`;
const DB_PASSWORD = `db/${randomUUID()}!`;
const MARKED = `m-${randomUUID()}`;
/** Stdio env values that are not secrets (by their names, or marked so): they come back intact. */
const PLAIN_ENV = {
  OAUTH_TOKEN_URL: 'https://login.example.com/oauth2/token',
  SESSION_DIR: '/var/lib/app/sessions',
  AUTH_MODE: 'interactive-login',
  BUILD_TOKEN: { value: `public-build-${randomUUID()}`, secret: false },
};
const ENV = 'CMCP_TEST_REDACT_TOKEN';

/** `v` with each UTF-8 byte of each character outside `keep` as `%HH` (`lower`: lower-case hex). */
function pct(v: string, keep: RegExp, lower: (i: number) => boolean = () => false): string {
  let i = 0;
  return [...v]
    .map((c) =>
      keep.test(c)
        ? c
        : [...Buffer.from(c)]
            .map((b) => {
              const h = b.toString(16).padStart(2, '0');
              return `%${lower(i++) ? h : h.toUpperCase()}`;
            })
            .join(''),
    )
    .join('');
}

/** The forms the fixture echoes each value in (its `forms`), plus each long PEM line. */
function forms(v: string): string[] {
  const out = [
    v,
    Buffer.from(v).toString('base64'),
    Buffer.from(v).toString('base64url'),
    encodeURIComponent(v),
    pct(v, /[A-Za-z0-9_.~-]/),
    pct(v, /[A-Za-z0-9_.~/-]/),
    pct(v, /[A-Za-z0-9_.~-]/, (i) => i % 2 === 1),
    Buffer.from(`user:${v}`).toString('base64'),
    JSON.stringify({ echoed: v }),
  ];
  if (v.includes('-----BEGIN')) {
    out.push(v.replace(/-----[^-]+-----|\s/g, ''));
    out.push(...v.split('\n').filter((l) => /^[A-Za-z0-9+/=]{16,}$/.test(l)));
  }
  return out;
}

/** A form as is and escaped in JSON text one, two and three strings deep. */
function escaped(n: string): string[] {
  const out = [n];
  for (let i = 0; i < 3; i++) out.push(JSON.stringify(out.at(-1)).slice(1, -1));
  return out;
}
/** The values of {@link PLAIN_ENV}. */
function plainValues(): string[] {
  return Object.values(PLAIN_ENV).map((v) => (typeof v === 'string' ? v : v.value));
}

let pki: TlsPki;
let upstream: ChildProcess;
let cfg: TestConfig;
let gw: Gateway;
let logText = '';
/** Every form of every secret; none may appear anywhere an agent, a log or the audit can read. */
let needles: string[] = [];
/** Everything the agent received, as JSON text. */
const received: string[] = [];

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-redact-'));
  pki = await makeTlsPki(dir);
  const keyFile = join(dir, 'api-key');
  writeFileSync(keyFile, `${API_KEY}\n`, { mode: 0o600 });
  const basicFile = join(dir, 'basic');
  writeFileSync(basicFile, BASIC, { mode: 0o600 });
  const valuesFile = join(dir, 'values.json');
  writeFileSync(valuesFile, JSON.stringify([TOKEN, API_KEY, PASSWORD, pki.client.key, pki.client.cert]));
  upstream = spawn(
    process.execPath,
    [FIXTURE, 'https', pki.server.certPath, pki.server.keyPath, pki.ca.certPath, pki.client.keyPath],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<number>((resolve, reject) => {
    upstream.once('exit', (code) => reject(new Error(`echo upstream exited (${code})`)));
    upstream.stdout?.once('data', (d: Buffer) =>
      resolve((JSON.parse(d.toString()) as { port: number }).port),
    );
  });
  process.env[ENV] = TOKEN;
  needles = [
    TOKEN,
    API_KEY,
    BASIC,
    PASSWORD,
    `svc-user:${PASSWORD}`,
    STDIO_TOKEN,
    URL_KEY,
    DB_PASSWORD,
    MARKED,
    pki.client.key,
    pki.client.cert,
  ]
    .flatMap(forms)
    .flatMap(escaped)
    .filter((n) => n.length >= 8);
  const web = {
    name: 'web',
    transport: 'http',
    url: `https://127.0.0.1:${port}/mcp?api_key=${URL_KEY}`,
    headers: {
      Authorization: { env: ENV, prefix: 'Bearer ' },
      'X-Api-Key': { file: keyFile },
      'X-Basic-Auth': { file: basicFile, prefix: 'Basic ' },
    },
    tls: { ca: pki.ca.certPath, client_cert: pki.client.certPath, client_key: pki.client.keyPath },
  };
  cfg = await writeConfig({
    dir,
    upstreams: [
      web,
      { ...web, name: 'refusing', url: `https://127.0.0.1:${port}/refuse` },
      {
        name: 'local',
        transport: 'stdio',
        command: process.execPath,
        args: [FIXTURE, 'stdio', valuesFile],
        env: {
          ECHO_API_TOKEN: STDIO_TOKEN,
          ...PLAIN_ENV,
          DATABASE_URL: `postgres://app:${encodeURIComponent(DB_PASSWORD)}@db.example:5432/app`,
          UPSTREAM_NOTE: { value: MARKED, secret: true },
          ECHO_ENV: `${Object.keys(PLAIN_ENV).join(',')},DATABASE_URL,UPSTREAM_NOTE`,
        },
      },
    ],
  });
  const log = pino(
    { level: 'trace' },
    {
      write: (s: string) => {
        logText += s;
      },
    },
  );
  gw = await startGateway(loadConfig(cfg.file), log);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  upstream?.kill();
  delete process.env[ENV];
  if (cfg) cleanup(cfg.dir);
});

/** A client channel (as the HTTP edge makes one): records notifications, answers sampling. */
function channel() {
  const notes: ClientMessage[] = [];
  const requests: ClientMessage[] = [];
  const ch: ClientChannel = {
    streaming: true,
    notify: (m) => {
      notes.push(m);
      return true;
    },
    request: async (m) => {
      requests.push(m);
      return { role: 'assistant', content: { type: 'text', text: 'ok' }, model: 'test-model' };
    },
    signal: new AbortController().signal,
    clientSessionId: gw.clientSessions.open('alice', '2025-11-25', undefined, { sampling: {} }).id,
  };
  return { ch, notes, requests };
}

/** Every audit entry of every chain. */
function auditEntries() {
  return gw.db
    .prepare<[], { chain_id: string }>('SELECT DISTINCT chain_id FROM audit_entries')
    .all()
    .flatMap((r) => gw.chain.entries(r.chain_id));
}

let nextId = 1;
async function rpc(ch: ClientChannel, method: string, params: Record<string, unknown>) {
  const r = await gw.mcp.handle(
    { agentId: 'alice', blocked: false },
    { jsonrpc: '2.0', id: nextId++, method, params },
    undefined,
    process.hrtime.bigint(),
    ch,
  );
  received.push(JSON.stringify(r.body));
  return r.body as {
    result?: Record<string, unknown> & { content?: { type: string; text: string }[] };
    error?: { code: number; message: string; data?: Record<string, unknown> };
  };
}

function expectClean(what: string, text: string): void {
  for (const n of needles) expect(text.includes(n), `${what} holds a secret form`).toBe(false);
}

describe.each(['web', 'local'])('the %s upstream echoes its credentials', (up) => {
  it('tool descriptions: redacted', async () => {
    const { ch } = channel();
    const list = await rpc(ch, 'tools/list', {});
    const tools = (list.result?.tools ?? []) as { name: string; description: string }[];
    const echo = tools.find((t) => t.name === `${up}.echo`);
    expect(echo?.description).toContain('[redacted]');
    expectClean('tools/list', JSON.stringify(list));
  });

  it('a result: redacted, still valid MCP content with valid JSON text; the audit digest is of what the agent got', async () => {
    const { ch } = channel();
    const r = await rpc(ch, 'tools/call', { name: `${up}.echo`, arguments: {} });
    const content = r.result?.content ?? [];
    expect(content[0]?.type).toBe('text');
    expect(content[0]?.text).toContain('[redacted]');
    const nested = JSON.parse(content[1]?.text ?? '') as { forms: string[] };
    expect(nested.forms.length).toBeGreaterThan(10);
    const intact = new Set(plainValues().flatMap(forms));
    expect(nested.forms.filter((f) => !f.includes('[redacted]') && !intact.has(f))).toEqual([]);
    expectClean('result', JSON.stringify(r));
    const { _meta: _m, ...plain } = r.result as Record<string, unknown>;
    const recorded = auditEntries().filter(
      (e) => e.entry_type === 'tool_call' && e.response_payload_hash === jcsDigest(plain),
    );
    expect(recorded.map((e) => e.server_identity)).toEqual([up]);
  });

  it('a JSON-RPC error: message and data redacted', async () => {
    const { ch } = channel();
    const r = await rpc(ch, 'tools/call', { name: `${up}.fail`, arguments: {} });
    expect(r.error?.message).toContain('[redacted]');
    expect(JSON.stringify(r.error?.data)).toContain('[redacted]');
    expectClean('error', JSON.stringify(r));
  });

  it('a log and a progress notification: redacted', async () => {
    const { ch, notes } = channel();
    await rpc(ch, 'logging/setLevel', { level: 'debug' });
    await rpc(ch, 'tools/call', { name: `${up}.log`, arguments: {} });
    await rpc(ch, 'tools/call', { name: `${up}.progress`, arguments: {}, _meta: { progressToken: 'p1' } });
    const log = notes.find((n) => n.method === 'notifications/message');
    const progress = notes.find((n) => n.method === 'notifications/progress');
    expect(JSON.stringify(log)).toContain('[redacted]');
    expect(JSON.stringify(progress)).toContain('[redacted]');
    received.push(JSON.stringify(notes));
    expectClean('notifications', JSON.stringify(notes));
  });

  it('a relayed sampling request: redacted', async () => {
    const { ch, requests } = channel();
    const r = await rpc(ch, 'tools/call', { name: `${up}.sample`, arguments: {} });
    expect(r.result?.content?.[0]?.text).toBe('sampled test-model');
    expect(JSON.stringify(requests[0])).toContain('[redacted]');
    received.push(JSON.stringify(requests));
    expectClean('sampling request', JSON.stringify(requests));
  });
});

describe('which configured values are secrets', () => {
  it('unmarked stdio env: names ending in a credential word, not names that merely contain one', () => {
    for (const n of [
      'GITHUB_PAT',
      'SENTRY_DSN',
      'DB_PASSWORD',
      'CLIENT_SECRET',
      'SLACK_TOKEN',
      'OPENAI_API_KEY',
      'APIKEY',
      'AWS_SECRET_ACCESS_KEY',
      'SSH_PRIVATE_KEY',
      'TOKEN',
    ])
      expect(SECRET_ENV_NAME.test(n), n).toBe(true);
    for (const n of [
      'OAUTH_TOKEN_URL',
      'SESSION_DIR',
      'TOKEN_FILE',
      'KEY_PATH',
      'AUTH_MODE',
      'PATH',
      'PWD',
      'SORT_KEY',
      'GOOGLE_APPLICATION_CREDENTIALS',
    ])
      expect(SECRET_ENV_NAME.test(n), n).toBe(false);
  });

  it('a marked entry wins either way; a URL value gives its password and secret query values', () => {
    const env = {
      NOTE: { value: 'innocuous-name-secret', secret: true },
      BUILD_TOKEN: { value: 'public-build-label', secret: false },
      GITHUB_PAT: 'ghp_0123456789',
      OAUTH_TOKEN_URL: 'https://login.example.com/oauth2/token',
      DATABASE_URL: 'postgres://app:p%40ss-w0rd-1@db:5432/app?sslmode=require',
      HOOK: 'https://hooks.example.com/x?api_key=abc-123-def&page=2',
    };
    expect(envSecrets(env).sort()).toEqual(
      [
        'innocuous-name-secret',
        'ghp_0123456789',
        'p@ss-w0rd-1',
        'app:p@ss-w0rd-1',
        'p%40ss-w0rd-1',
        'app:p%40ss-w0rd-1',
        'abc-123-def',
      ].sort(),
    );
    expect(urlSecrets('https://u:pw@h/mcp?token=t1&access_token=t2&sig=t3&id=4')).toEqual([
      'pw',
      'u:pw',
      'pw',
      'u:pw',
      't1',
      't2',
      't3',
    ]);
    expect(urlSecrets('not a url: api_key=x')).toEqual([]);
  });
});

describe('an HTTP upstream url with a secret in it', () => {
  it('is shown redacted in a start-up failure', () => {
    const web = loadConfig(cfg.file).upstreams.find((u) => u.name === 'web');
    if (web?.transport !== 'http') throw new Error('no web upstream');
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const text = describeUpstreamFailure(web, refused);
    expect(text).toMatch(
      /^HTTP upstream at https:\/\/127\.0\.0\.1:\d+\/mcp\?api_key=\[redacted\] is not reachable/,
    );
    expect(text).not.toContain(URL_KEY);
  });
});

describe('stdio env values that are not secrets', () => {
  it('come back intact: names that merely contain TOKEN, SESSION or AUTH, and an entry marked secret: false', async () => {
    const { ch } = channel();
    const r = await rpc(ch, 'tools/call', { name: 'local.echo', arguments: {} });
    const text = r.result?.content?.[0]?.text ?? '';
    for (const v of plainValues()) expect(text).toContain(v);
    // The DATABASE_URL is echoed with its userinfo (user:password) taken out, the rest kept.
    expect(text).toContain(`postgres://${REDACTED}@db.example:5432/app`);
  });
});

describe('what the gateway keeps', () => {
  it('holds no secret form: log output, database, audit entries', async () => {
    const entries = auditEntries();
    expect(entries.some((e) => e.entry_type === 'tool_call')).toBe(true);
    expectClean('audit entries', JSON.stringify(entries));
    await gw.close();
    const db = [cfg.dbPath, `${cfg.dbPath}-wal`]
      .filter(existsSync)
      .map((f) => readFileSync(f).toString('latin1'))
      .join('');
    expect(db).toContain('web.echo');
    // The refusing upstream's 401 body was quoted in the start-up failure the log recorded.
    expect(logText).toMatch(/refusing[^\n]*HTTP 401[^\n]*\[redacted\]/);
    expectClean('database', db);
    expectClean('log output', logText);
    expectClean('agent responses', received.join('\n'));
  });
});

describe('the redaction rules', () => {
  const S = `s3cr3t-${randomUUID()}`;
  const r = new Redactor(secretForms(S));

  it('a secret under 8 characters is not redacted (it would blank out ordinary words)', () => {
    expect(MIN_SECRET_CHARS).toBe(8);
    expect(secretForms('hunter2')).toEqual([]);
    expect(secretForms('hunter22')).toContain('hunter22');
  });

  it('percent-encoded by any encoder: strict RFC 3986, Python quote(), form encoding, either hex case, partly', () => {
    const k = `sk_live/Ab+cD3fGh!*'() ${randomUUID()}~é`;
    const p = new Redactor(secretForms(k));
    const variants = [
      encodeURIComponent(k),
      pct(k, /[A-Za-z0-9_.~-]/), // strict RFC 3986
      pct(k, /[A-Za-z0-9_.~/-]/), // Python quote(): keeps /
      pct(k, /[A-Za-z0-9_.~-]/, () => true), // lower-case hex
      pct(k, /[A-Za-z0-9_.~-]/, (i) => i % 2 === 0), // mixed
      pct(k, /[A-Za-z0-9_.~/+-]/), // only some characters escaped
      new URLSearchParams({ v: k }).toString().slice(2), // form encoding: a space as +
      pct(k, /[A-Za-z0-9]/), // everything but letters and digits
    ];
    for (const v of variants) expect(p.text(`x=${v}&y=1`), v).toBe(`x=${REDACTED}&y=1`);
    // Base64 of the secret, percent-encoded (a signature in a query string).
    const b64 = Buffer.from(`x${k}`).toString('base64');
    expect(p.text(encodeURIComponent(b64))).toContain(REDACTED);
    // Letters and digits escaped, or escaped twice: not covered.
    expect(p.text(pct(k, /^$/))).not.toContain(REDACTED);
    expect(p.text(encodeURIComponent(encodeURIComponent(k)))).not.toContain(REDACTED);
    // Text that resembles the secret but is not it stays.
    expect(p.text(`${k.slice(0, -3)}%C3%A8`)).not.toContain(REDACTED);
  });

  it('base64 and base64url of a text holding the secret, at every byte offset', () => {
    for (let k = 0; k < 6; k++)
      for (const enc of ['base64', 'base64url'] as const) {
        const b = Buffer.from(`${'x'.repeat(k)}${S}!`).toString(enc);
        expect(r.text(b), `${enc} at offset ${k}`).toContain(REDACTED);
      }
  });

  it('a Basic value: the decoded user:password and the password alone', () => {
    const pw = `pw-${randomUUID()}`;
    const basic = new Redactor(secretForms(Buffer.from(`me:${pw}`).toString('base64')));
    expect(basic.text(`user me:${pw}`)).toBe(`user ${REDACTED}`);
    expect(basic.text(`password ${pw}`)).toBe(`password ${REDACTED}`);
  });

  it('a PEM file: each base64 line, also in one unwrapped line and percent-encoded', () => {
    const body = Buffer.from(randomUUID().repeat(6)).toString('base64');
    const pem = `-----BEGIN PRIVATE KEY-----\n${body.replace(/.{64}/g, '$&\n')}\n-----END PRIVATE KEY-----\n`;
    const p = new Redactor(pemForms(pem));
    expect(p.text(`key=${body}`)).not.toMatch(/[A-Za-z0-9+/]{16}/);
    expect(p.text(encodeURIComponent(pem))).not.toMatch(/[A-Za-z0-9]{16}/);
  });

  it('an error and its causes, a DOMException (getter-only message) too', () => {
    const e = new Error(`failed: ${S}`, { cause: new DOMException(`aborted: ${S}`, 'AbortError') });
    expect(r.error(e)).toBe(e);
    expect(e.message).toBe(`failed: ${REDACTED}`);
    expect((e.cause as DOMException).message).toBe(`aborted: ${REDACTED}`);
    expect((e.cause as DOMException).name).toBe('AbortError');
  });

  it('a clean value is returned as it came (no copy); a member name is redacted, a __proto__ member kept', () => {
    const clean = { content: [{ type: 'text', text: 'nothing here' }] };
    expect(r.value(clean)).toBe(clean);
    const dirty = JSON.parse(`{"__proto__":{"a":1},"${S}":"x","t":"${S}"}`) as Record<string, unknown>;
    const out = r.value(dirty);
    expect(Object.keys(out)).toEqual(['__proto__', REDACTED, 't']);
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(out.t).toBe(REDACTED);
  });
});
