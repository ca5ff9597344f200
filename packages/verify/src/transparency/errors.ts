/** The one error class of the transparency formats (codes: errors/codes.ts TRANSPARENCY_ERRORS). */

import type { TRANSPARENCY_ERRORS } from '../errors/codes.js';
import { CmcpError } from '../errors/index.js';

/** A tree, proof, note, checkpoint or receipt that does not parse or does not fit. */
export class TransparencyError extends CmcpError {
  declare readonly code: keyof typeof TRANSPARENCY_ERRORS;
  constructor(code: keyof typeof TRANSPARENCY_ERRORS, message: string) {
    super(code, message);
    this.name = 'TransparencyError';
  }
}
