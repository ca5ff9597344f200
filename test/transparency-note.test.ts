/**
 * Signed notes and checkpoints (packages/verify/src/transparency/note.ts, checkpoint.ts) against
 * the published examples of the C2SP specifications (github.com/C2SP/C2SP, used as data):
 * signed-note's verifier key `example.com/foo` and the note it verifies, and tlog-checkpoint's
 * example checkpoint `example.com/behind-the-sofa`. Then our own checkpoints: signed by a gateway
 * key, read back, and refused when the text, the key or the chain differs.
 */
import { generateKeyPairSync } from 'node:crypto';
import {
  checkpointVerifier,
  ed25519PublicJwk,
  encodeCheckpoint,
  encodeVerifierKey,
  noteKeyId,
  noteVerifier,
  openNote,
  parseCheckpoint,
  parseVerifierKey,
  readChainCheckpoint,
  sessionOrigin,
  signChainCheckpoint,
  signNote,
  TransparencyError,
  verifyChainCheckpoint,
  verifyNote,
} from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';

/** c2sp.org/signed-note, "Verifier keys" → "Example". */
const FOO_VKEY = 'example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k';
const FOO_NOTE =
  'This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n';
/** c2sp.org/tlog-checkpoint, the example at the top. */
const SOFA_NOTE =
  'example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n';

const code = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(TransparencyError);
    return (e as TransparencyError).code;
  }
  return 'no error';
};

describe('C2SP signed-note example', () => {
  it('parses the published vkey, whose key ID is SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)[:4], and re-encodes it', () => {
    const v = parseVerifierKey(FOO_VKEY);
    expect(v.name).toBe('example.com/foo');
    expect(v.keyId).toBe(0x530d903a);
    expect(noteKeyId(v.name, v.publicKey)).toBe(0x530d903a);
    expect(encodeVerifierKey(v)).toBe(FOO_VKEY);
  });

  it('verifies the published note, and refuses it changed by one byte', () => {
    const v = parseVerifierKey(FOO_VKEY);
    expect(verifyNote(FOO_NOTE, [v])?.text).toBe('This is an example message.\n');
    expect(verifyNote(FOO_NOTE.replace('example message', 'example massage'), [v])).toBeNull();
    // A key of the same name but another ID is unknown: ignored, so nothing verifies.
    expect(verifyNote(FOO_NOTE, [{ ...v, keyId: v.keyId ^ 1 }])).toBeNull();
  });

  it('a note we sign with a key verifies under its vkey exactly like the published one', () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const note = signNote('This is an example message.\n', 'example.com/foo', privateKey);
    const pub = Buffer.from(ed25519PublicJwk(privateKey).x, 'base64url');
    const sig = openNote(note).signatures[0];
    expect(sig?.keyId).toBe(noteKeyId('example.com/foo', pub));
    expect(note.split('\n\n')[0]).toBe('This is an example message.');
    expect(
      verifyNote(note, [
        parseVerifierKey(
          encodeVerifierKey({ name: 'example.com/foo', keyId: sig?.keyId ?? 0, publicKey: pub }),
        ),
      ]),
    ).not.toBeNull();
  });

  it('parses a vkey whose base64 holds a plus (only the first two pluses separate)', () => {
    const withPlus = Array.from({ length: 256 }, (_, i) => noteVerifier('example.com/p', Buffer.alloc(32, i)))
      .map(encodeVerifierKey)
      .filter((k) => k.split('+').length > 3);
    expect(withPlus.length).toBeGreaterThan(0);
    for (const k of withPlus) expect(encodeVerifierKey(parseVerifierKey(k))).toBe(k);
  });

  it('refuses malformed notes and keys with stable codes', () => {
    expect(code(() => openNote('no blank line\n— a AAAAAAA=\n'))).toBe('NOTE_MALFORMED');
    expect(code(() => openNote('text\n\nnot a signature\n'))).toBe('NOTE_MALFORMED');
    expect(code(() => openNote('text\twith tab\n\n— a AAAAAAA=\n'))).toBe('NOTE_MALFORMED');
    expect(
      code(() => parseVerifierKey('example.com/foo+530d903b+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k')),
    ).toBe('NOTE_KEY_INVALID');
    expect(
      code(() => parseVerifierKey('example.com/foo+530d903a+AgkyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k')),
    ).toBe('NOTE_KEY_INVALID');
  });
});

describe('C2SP tlog-checkpoint example', () => {
  it('parses the published checkpoint and encodes the same text back', () => {
    const { text, signatures } = openNote(SOFA_NOTE);
    const cp = parseCheckpoint(text);
    expect(cp.origin).toBe('example.com/behind-the-sofa');
    expect(cp.size).toBe(20852163);
    expect(cp.root.toString('base64')).toBe('CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=');
    expect(cp.extensions).toEqual([]);
    expect(encodeCheckpoint(cp)).toBe(text);
    expect(signatures).toHaveLength(1);
    expect(signatures[0]?.name).toBe('example.com/behind-the-sofa');
    expect(signatures[0]?.signature).toHaveLength(64);
  });

  it('refuses checkpoint texts the format does not allow', () => {
    expect(
      code(() => parseCheckpoint('example.com/log\n0020\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n')),
    ).toBe('CHECKPOINT_MALFORMED');
    expect(code(() => parseCheckpoint('example.com/log\n20\nCsUYap==\n'))).toBe('CHECKPOINT_MALFORMED');
    expect(code(() => parseCheckpoint('example.com/log\n20\n'))).toBe('CHECKPOINT_MALFORMED');
    expect(
      code(() => parseCheckpoint('example.com/log\n20\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n')),
    ).toBe('CHECKPOINT_MALFORMED');
  });
});

describe('cmcp chain checkpoints', () => {
  const session = '0f6d2a3e-5b7c-4c1e-9a8d-2b3c4d5e6f70';
  const root = Buffer.alloc(32, 7);
  const time = '2026-12-08T00:00:00.123Z';

  it('is a tlog checkpoint of origin cmcp.dev/session/<id> with a time line, signed under the origin', () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const jwk = ed25519PublicJwk(privateKey);
    const note = signChainCheckpoint({ chain_id: session, size: 12, root, time }, privateKey);
    const { text, signatures } = openNote(note);
    expect(text).toBe(`cmcp.dev/session/${session}\n12\n${root.toString('base64')}\ntime ${time}\n`);
    expect(signatures[0]?.name).toBe(sessionOrigin(session));
    expect(signatures[0]?.keyId).toBe(checkpointVerifier(sessionOrigin(session), jwk).keyId);
    // A generic C2SP verifier with the vkey reads it.
    const vkey = encodeVerifierKey(checkpointVerifier(sessionOrigin(session), jwk));
    expect(verifyNote(note, [parseVerifierKey(vkey)])?.text).toBe(text);
    const ok = verifyChainCheckpoint(note, [jwk]);
    expect(ok?.checkpoint).toEqual({ chain_id: session, size: 12, root, time });
  });

  it('refuses another key, a changed size and a note moved to another session', () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const other = ed25519PublicJwk(generateKeyPairSync('ed25519').privateKey);
    const jwk = ed25519PublicJwk(privateKey);
    const note = signChainCheckpoint({ chain_id: session, size: 12, root, time }, privateKey);
    expect(verifyChainCheckpoint(note, [other])).toBeNull();
    expect(verifyChainCheckpoint(note, [other, jwk])?.key).toEqual(jwk);
    expect(verifyChainCheckpoint(note.replace('\n12\n', '\n13\n'), [jwk])).toBeNull();
    const moved = note.replaceAll(session, '1f6d2a3e-5b7c-4c1e-9a8d-2b3c4d5e6f70');
    expect(readChainCheckpoint(moved).chain_id).not.toBe(session);
    expect(verifyChainCheckpoint(moved, [jwk])).toBeNull();
  });

  it('refuses an origin that names no cmcp chain, and a checkpoint without a time line', () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const foreign = signNote(
      `example.com/log\n1\n${root.toString('base64')}\ntime ${time}\n`,
      'example.com/log',
      privateKey,
    );
    expect(code(() => readChainCheckpoint(foreign))).toBe('CHECKPOINT_MALFORMED');
    const untimed = signNote(
      `${sessionOrigin(session)}\n1\n${root.toString('base64')}\n`,
      sessionOrigin(session),
      privateKey,
    );
    expect(code(() => readChainCheckpoint(untimed))).toBe('CHECKPOINT_MALFORMED');
  });
});
