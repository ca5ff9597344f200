/**
 * The README and docs/getting-started.md read in short sentences: none is over 40 words. The
 * prose is split into sentences at `.`, `!` or `?` followed by white space, at blank lines and at
 * the start of list items and headings; fenced code blocks, tables and HTML comments are not prose.
 * The README also stays short: at most 80 lines.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

const MAX_WORDS = 40;

/** The sentences of a Markdown text's prose, each with the line it starts on. */
function sentences(md: string): { line: number; text: string; words: number }[] {
  const out: { line: number; text: string; words: number }[] = [];
  let current: string[] = [];
  let start = 0;
  const flush = () => {
    const text = current.join(' ').trim();
    if (text) out.push({ line: start, text, words: text.split(/\s+/).length });
    current = [];
  };
  let fenced = false;
  let comment = false;
  md.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (/^(```|~~~)/.test(line)) {
      flush();
      fenced = !fenced;
      return;
    }
    if (fenced) return;
    if (comment || line.startsWith('<!--')) {
      comment = !line.includes('-->');
      return;
    }
    if (line === '' || line.startsWith('|')) {
      flush();
      return;
    }
    // A heading or a list item starts a sentence of its own.
    if (/^(#{1,6}\s|[-*+]\s|\d+[.)]\s)/.test(line)) flush();
    const parts = line.split(/(?<=[.!?])\s+/);
    parts.forEach((p, j) => {
      if (current.length === 0) start = i + 1;
      current.push(p);
      if (j < parts.length - 1 || /[.!?]$/.test(p)) flush();
    });
  });
  flush();
  return out;
}

function longSentences(file: string): string[] {
  return sentences(readFileSync(join(REPO_ROOT, file), 'utf8'))
    .filter((s) => s.words > MAX_WORDS)
    .map((s) => `${file}:${s.line} (${s.words} words): ${s.text.slice(0, 120)}…`);
}

describe('short sentences', () => {
  it('the splitter finds a long sentence, and ignores code blocks, tables and list boundaries', () => {
    const long = `${Array.from({ length: 41 }, (_, i) => `w${i}`).join(' ')}.`;
    const code = `\`\`\`sh\n${long}\n\`\`\``;
    const table = `| a | ${long} |`;
    const list = `- ${Array.from({ length: 30 }, () => 'x').join(' ')}\n- ${Array.from({ length: 30 }, () => 'y').join(' ')}`;
    expect(sentences(long).map((s) => s.words)).toEqual([41]);
    expect(sentences(`${code}\n\n${table}\n\n${list}`).map((s) => s.words)).toEqual([31, 31]);
    expect(sentences('One two.\nThree four five. Six!').map((s) => s.words)).toEqual([2, 3, 1]);
  });

  it(`no sentence in README.md or docs/getting-started.md is over ${MAX_WORDS} words`, () => {
    expect([...longSentences('README.md'), ...longSentences('docs/getting-started.md')]).toEqual([]);
  });

  it('README.md is at most 80 lines', () => {
    expect(
      readFileSync(join(REPO_ROOT, 'README.md'), 'utf8').trimEnd().split('\n').length,
    ).toBeLessThanOrEqual(80);
  });
});
