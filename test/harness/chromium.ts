/**
 * Debian's headless Chromium for the tests that a person would look at (the console, the
 * in-browser verifier), through puppeteer-core: a fresh profile and the flags that keep it off
 * the network (this machine has none beyond the package registries).
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';

/** Where Debian's `chromium` package installs the browser (scripts/setup.sh installs it). */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Launches headless Chromium with a fresh profile under `workDir`.
 * @throws Error when /usr/bin/chromium is missing (run scripts/setup.sh).
 */
export async function launchChromium(workDir: string): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: run scripts/setup.sh --for test, as npm test does (Debian package chromium)`,
    );
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: mkdtempSync(join(workDir, 'profile-')),
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
