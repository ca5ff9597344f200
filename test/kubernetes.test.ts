/**
 * deploy/kubernetes/ (deploy/README.md, "Kubernetes"): each kustomization rendered with
 * `kubectl kustomize` (offline), every object validated against the Kubernetes OpenAPI schemas
 * as compiled by the npm package kubernetes-models (type, required and enum checks; like the API
 * server's schema, it does not refuse unknown fields), and the parts that must agree checked:
 * the replicas' configs pass the gateway's own validation with distinct instance_ids equal to
 * the StatefulSet's pod names, the probes and Service use the configured port, the database
 * password comes only from the Secret, and the confidential-containers overlay runs in a Kata
 * runtime class with initdata that decodes to initdata.toml and requires hardware evidence.
 * kubectl is not in Debian 12 (its kubernetes-client is too old for these kustomizations): without
 * it, the objects are assembled from the kustomizations' own files by {@link assemble} (resources,
 * config map generators, the overlay's JSON patches of `add`), with a visible line; the schema and
 * agreement checks run either way, and where kubectl is present both renderings are validated.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { parseConfig } from '../src/config/index.js';
import { REPO_ROOT } from './harness/gateway.js';

const K8S = join(REPO_ROOT, 'deploy', 'kubernetes');

type Obj = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; annotations?: Record<string, string> };
} & Record<string, unknown>;

const kubectl = spawnSync('sh', ['-c', 'command -v kubectl']).status === 0;
if (!kubectl)
  process.stdout.write(
    'kubernetes.test: kubectl not found: objects assembled from the kustomization files\n',
  );

interface Kustomization {
  resources?: string[];
  configMapGenerator?: { name: string; files: string[] }[];
  patches?: { target: { kind: string; name: string }; patch: string }[];
}

/**
 * The objects of a kustomization without kubectl: its resource files (a folder is another
 * kustomization), its generated ConfigMaps (replacing one of the same name), then its JSON
 * patches, of which only `add` is used here. No namespace, labels or name suffixes.
 */
function assemble(dir: string): Obj[] {
  const abs = join(K8S, dir);
  const k = parse(readFileSync(join(abs, 'kustomization.yaml'), 'utf8')) as Kustomization;
  let objs: Obj[] = [];
  for (const r of k.resources ?? []) {
    if (r.endsWith('.yaml'))
      objs.push(...parseAllDocuments(readFileSync(join(abs, r), 'utf8')).map((d) => d.toJS() as Obj));
    else objs.push(...assemble(join(dir, r)));
  }
  for (const g of k.configMapGenerator ?? []) {
    const data = Object.fromEntries(g.files.map((f) => [basename(f), readFileSync(join(abs, f), 'utf8')]));
    objs = objs.filter((o) => !(o.kind === 'ConfigMap' && o.metadata.name === g.name));
    objs.push({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: g.name }, data });
  }
  for (const p of k.patches ?? []) {
    const target = objs.find((o) => o.kind === p.target.kind && o.metadata.name === p.target.name);
    if (!target) throw new Error(`${dir}: no ${p.target.kind} ${p.target.name} to patch`);
    for (const op of parse(p.patch) as { op: string; path: string; value: unknown }[]) {
      if (op.op !== 'add') throw new Error(`${dir}: patch op ${op.op} is not assembled here`);
      const keys = op.path.split('/').slice(1);
      const last = keys.pop() as string;
      const parent = keys.reduce((o, key) => (o as Record<string, unknown>)[key], target as unknown);
      (parent as Record<string, unknown>)[last] = op.value;
    }
  }
  return objs;
}

/** The objects of a kustomization: rendered by kubectl where there is one, else {@link assemble}d. */
const load = (dir: string): Obj[] => (kubectl ? render(dir) : assemble(dir));

/** `kubectl kustomize DIR`, parsed into objects. */
function render(dir: string): Obj[] {
  const r = spawnSync('kubectl', ['kustomize', join(K8S, dir)], { encoding: 'utf8', maxBuffer: 16 << 20 });
  if (r.status !== 0) throw new Error(`kubectl kustomize ${dir}: ${r.stderr}`);
  return parseAllDocuments(r.stdout).map((d) => d.toJS() as Obj);
}

/**
 * Validates `obj` with the kubernetes-models class of its apiVersion and kind.
 * @throws Error naming the object and the schema's complaint; for a kind it has no model of.
 */
async function validate(obj: Obj): Promise<void> {
  const [group, version] = obj.apiVersion.includes('/') ? obj.apiVersion.split('/') : ['', obj.apiVersion];
  const path = group
    ? `kubernetes-models/${group}/${version}/${obj.kind}`
    : `kubernetes-models/${version}/${obj.kind}`;
  const mod = (await import(path).catch(() => {
    throw new Error(`no schema for ${obj.apiVersion} ${obj.kind}`);
  })) as Record<string, new (d: unknown) => { validate(): void }>;
  const Model = mod[obj.kind];
  if (!Model) throw new Error(`no schema for ${obj.apiVersion} ${obj.kind}`);
  try {
    new Model(obj).validate();
  } catch (e) {
    throw new Error(`${obj.kind}/${obj.metadata?.name}: ${(e as Error).message}`);
  }
}

const one = (objs: Obj[], kind: string, name: string): Obj => {
  const o = objs.find((x) => x.kind === kind && x.metadata.name.startsWith(name));
  if (!o) throw new Error(`no ${kind} ${name}`);
  return o;
};

interface Container {
  args: string[];
  env: { name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  ports: { name: string; containerPort: number }[];
  readinessProbe: { httpGet: { path: string; port: string } };
  securityContext: Record<string, unknown>;
}
interface PodTemplate {
  metadata: { annotations?: Record<string, string> };
  spec: { runtimeClassName?: string; containers: Container[]; securityContext: Record<string, unknown> };
}

describe('deploy/kubernetes', () => {
  it('every object of the base, the PostgreSQL and the confidential-containers overlay validates against the Kubernetes schemas', async () => {
    const dirs = ['base', 'postgres', 'overlays/coco'];
    const all = [...dirs.flatMap(assemble), ...(kubectl ? dirs.flatMap(render) : [])];
    expect(all.length).toBeGreaterThan(10);
    for (const obj of all) await validate(obj);
    // The check can fail: a wrong type and an unknown kind are refused.
    const sts = structuredClone(one(load('base'), 'StatefulSet', 'cmcp'));
    (sts.spec as Record<string, unknown>).replicas = 'three';
    await expect(validate(sts)).rejects.toThrow(/replicas must be integer/);
    await expect(validate({ ...sts, kind: 'StatefulSett' })).rejects.toThrow(/no schema/);
  });

  it('replicas: one valid config per pod (instance_id = pod name), on PostgreSQL, the password only from the Secret', () => {
    const base = load('base');
    const pg = load('postgres');
    const sts = one(base, 'StatefulSet', 'cmcp');
    const spec = sts.spec as { replicas: number; template: PodTemplate };
    const c = spec.template.spec.containers[0] as Container;
    expect(c.args).toEqual(['start', '--config', '/etc/cmcp/$(POD_NAME).yaml']);
    const configs = (one(base, 'ConfigMap', 'cmcp-config').data ?? {}) as Record<string, string>;
    const pgService = one(pg, 'Service', 'cmcp-postgres').metadata.name;
    expect(Object.keys(configs).sort()).toEqual(
      Array.from({ length: spec.replicas }, (_, i) => `${sts.metadata.name}-${i}.yaml`),
    );
    for (const [file, text] of Object.entries(configs)) {
      const cfg = parseConfig(parse(text), file);
      expect(cfg.instance_id).toBe(file.replace(/\.yaml$/, ''));
      const url = new URL(cfg.database);
      expect(url.protocol).toBe('postgres:');
      expect(url.hostname).toBe(pgService);
      expect(url.password).toBe('');
      expect(cfg.listen.port).toBe(c.ports[0]?.containerPort);
    }
    const secretRef = c.env.find((e) => e.name === 'PGPASSWORD')?.valueFrom?.secretKeyRef;
    const secret = one(pg, 'Secret', 'cmcp-postgres');
    expect(secretRef?.name).toBe(secret.metadata.name);
    expect(Object.keys(secret.stringData as object)).toContain(secretRef?.key);
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'mcp', scheme: 'HTTPS' });
    expect(c.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
    });
    expect(spec.template.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 });
  });

  it('the confidential-containers overlay: a Kata runtime class, initdata = initdata.toml (exec refused), minimum_tier tee', () => {
    const coco = load('overlays/coco');
    const template = (one(coco, 'StatefulSet', 'cmcp').spec as { template: PodTemplate }).template;
    expect(template.spec.runtimeClassName).toMatch(/^kata-qemu-(snp|tdx)$/);
    const encoded = template.metadata.annotations?.['io.katacontainers.config.hypervisor.cc_init_data'] ?? '';
    const initdata = gunzipSync(Buffer.from(encoded, 'base64')).toString('utf8');
    expect(initdata).toBe(readFileSync(join(K8S, 'overlays', 'coco', 'initdata.toml'), 'utf8'));
    expect(initdata).toMatch(/^default ExecProcessRequest := false$/m);
    expect(initdata).toMatch(/^default SetPolicyRequest := false$/m);
    const configs = (one(coco, 'ConfigMap', 'cmcp-config').data ?? {}) as Record<string, string>;
    expect(Object.keys(configs).length).toBe(3);
    for (const [file, text] of Object.entries(configs)) {
      expect(parseConfig(parse(text), file).attestation.minimum_tier, file).toBe('tee');
    }
  });
});
