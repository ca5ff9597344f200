/**
 * Keeps the gateway clear of a V8 fatal (docs/testing.md, Node.js; test/load-stability.test.ts): on V8 older than 13 (Node.js 22 and older),
 * a lazy de-optimisation of a function with an inlined JS→Wasm call — `PolicyEngine.evaluate`
 * calling cedar-wasm, invalidated while that call is on the stack — aborts the process with
 * `Fatal error … unreachable code` in `Deoptimizer::DoComputeBuiltinContinuation`. Measured:
 * Node 20.20 (V8 11.3) and Node 22.23 (V8 12.4) die under the load-idle-load run of
 * test/load-stability.test.ts; Node 24.22 (V8 13.6) survives it, the same de-optimisation
 * included, and is left as it is. There, this turns the inlining off before any JS is optimised
 * (`--no-turbo-inline-js-wasm-calls`: TurboFan reads it per compile job), which the same runs
 * survive. Imported first by ./engine.ts, so every process that evaluates policy has it.
 */
import { setFlagsFromString } from 'node:v8';

/** The V8 major below which the flag is set (V8 13.6 in Node 24 survives without it). */
export const FIXED_V8_MAJOR = 13;

/** True when this process runs on a V8 that needs `--no-turbo-inline-js-wasm-calls`. */
export const needsJsWasmInliningOff = Number(process.versions.v8.split('.')[0]) < FIXED_V8_MAJOR;

if (needsJsWasmInliningOff) setFlagsFromString('--no-turbo-inline-js-wasm-calls');
