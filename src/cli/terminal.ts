/**
 * Text for a terminal from values others chose (upstream tool names, agent ids, execution ids):
 * ANSI/ECMA-48 escape sequences (CSI, OSC, other ESC sequences) are removed and every other C0/C1
 * control character is shown as U+FFFD, so a name cannot recolour, retitle or clear the
 * operator's terminal, nor fake extra lines (ECMA-48 §5.4 control sequences, §8.3 C1 set).
 */

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching terminal escapes is the point
const OSC = /(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching terminal escapes is the point
const CSI = /(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching terminal escapes is the point
const ESC = /\x1b[ -/]*[0-~]?/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: replacing control characters is the point
const CONTROL = /[\x00-\x1f\x7f-\x9f]/g;

/** `text` safe to print on one terminal line. */
export function terminalSafe(text: string): string {
  return text.replace(OSC, '').replace(CSI, '').replace(ESC, '').replace(CONTROL, '\uFFFD');
}
