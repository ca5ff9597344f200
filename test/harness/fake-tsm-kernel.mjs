// A fake configfs-tsm "kernel" for tests (see fake-tsm.ts): it watches a report directory,
// gives each new entry its attribute files (provider, generation, inblob), and answers an
// inblob write with recorded evidence from test/vectors, the way the kernel's outblob/
// auxblob/generation attributes behave. It tests the gateway's file ABI handling, not signatures.
//
// argv[2]: JSON { root, provider, outblob (path), auxblob (path|null), reportDataOffset, mode }
// mode: echo (REPORT_DATA := inblob) | stale (recorded REPORT_DATA kept) | race (a second writer
// bumps generation) | refuse-write (inblob cannot be written) | silent (never answers)
import { mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const cfg = JSON.parse(process.argv[2]);
const recordedOut = readFileSync(cfg.outblob);
const recordedAux = cfg.auxblob ? readFileSync(cfg.auxblob) : null;
const entries = new Map();

function atomicWrite(path, data) {
  const tmp = `${path}.tmp${process.pid}`;
  writeFileSync(tmp, data);
  renameSync(tmp, path);
}

function scan() {
  let names;
  try {
    names = readdirSync(cfg.root);
  } catch {
    return;
  }
  const live = new Set(names);
  for (const k of entries.keys()) if (!live.has(k)) entries.delete(k);
  for (const n of names) {
    const dir = join(cfg.root, n);
    let st = entries.get(n);
    if (!st) {
      try {
        if (!statSync(dir).isDirectory()) continue;
        if (cfg.mode === 'refuse-write') mkdirSync(join(dir, 'inblob'));
        else writeFileSync(join(dir, 'inblob'), Buffer.alloc(0));
        atomicWrite(join(dir, 'provider'), `${cfg.provider}\n`);
        atomicWrite(join(dir, 'generation'), '0\n');
      } catch {
        continue; // removed meanwhile
      }
      st = { gen: 0, answered: false };
      entries.set(n, st);
      continue;
    }
    if (st.answered || cfg.mode === 'silent' || cfg.mode === 'refuse-write') continue;
    let inblob;
    try {
      inblob = readFileSync(join(dir, 'inblob'));
    } catch {
      continue;
    }
    if (inblob.length === 0) continue;
    st.answered = true;
    try {
      const out = Buffer.from(recordedOut);
      if (cfg.mode !== 'stale') inblob.subarray(0, 64).copy(out, cfg.reportDataOffset);
      atomicWrite(join(dir, 'outblob'), out);
      if (recordedAux) atomicWrite(join(dir, 'auxblob'), recordedAux);
      st.gen += cfg.mode === 'race' ? 2 : 1;
      atomicWrite(join(dir, 'generation'), `${st.gen}\n`);
    } catch {
      // entry removed while answering
    }
  }
}

setInterval(scan, 2);
scan();
process.stdout.write('ready\n');
process.on('SIGTERM', () => process.exit(0));
