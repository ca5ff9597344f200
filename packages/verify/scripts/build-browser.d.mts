/** Types of build-browser.mjs (the browser bundle of @cmcp/verify). */
export interface BrowserBuildError {
  text: string;
  file: string | null;
}
export interface BrowserBuildResult {
  ok: boolean;
  outfile: string;
  errors: BrowserBuildError[];
}
export const BROWSER_ENTRY: string;
export const BROWSER_OUTFILE: string;
export function buildBrowser(outfile?: string, entry?: string): Promise<BrowserBuildResult>;
export function nodeBuiltinBlockers(errors: BrowserBuildError[]): {
  blockers: Record<string, string[]>;
  others: string[];
};
