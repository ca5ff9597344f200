/**
 * The upstreams of bench/relayed-progress.ts in a process of their own (as an MCP server runs
 * beside its clients): the conformance fixture answering on SSE and the same fixture answering
 * JSON. Prints one line `{"sse":URL,"json":URL}` when both listen; exits when stdin closes.
 */
import { startFixtureServer } from '../testing/conformance/fixture-server.js';

const sse = await startFixtureServer();
const json = await startFixtureServer(0, { jsonResponse: true });
process.stdout.write(`${JSON.stringify({ sse: sse.url, json: json.url })}\n`);
process.stdin.resume();
process.stdin.on('end', async () => {
  await sse.close();
  await json.close();
  process.exit(0);
});
