/**
 * The demo's relayed-MCP step (issue 10): beyond tools, the client reads a resource, gets a
 * prompt and runs a tool that reports progress, all through the gateway and in the demo's
 * session, each answered with the gateway's evidence of its terminal audit entry.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';

interface Evidence {
  session_id: string | null;
  sequence_number: number;
  entry_hash: string;
}

function evidenceOf(result: { _meta?: Record<string, unknown> }, what: string, sessionId: string): Evidence {
  const e = result._meta?.['dev.cmcp/evidence'] as Evidence | undefined;
  if (e?.session_id !== sessionId) throw new Error(`${what}: not recorded in session ${sessionId}`);
  return e;
}

/**
 * resources/read of the first resource everything lists, prompts/get of its simple prompt, and
 * its long-running tool with a progress token.
 * @param print one line of demo output.
 * @throws Error when any of them fails or is not recorded in the session.
 */
export async function useRelayedMethods(
  client: Client,
  sessionId: string,
  signal: AbortSignal,
  print: (line: string) => void,
): Promise<void> {
  const inSession = { _cmcp: { session_id: sessionId } };
  const { resources } = await client.listResources(undefined, { signal });
  const first = resources.find((r) => r.uri.startsWith('demo://'));
  if (!first) throw new Error('resources/list shows no resource of server-everything');
  const read = await client.readResource({ uri: first.uri, ...inSession }, { signal });
  const r = evidenceOf(read, 'resources/read', sessionId);
  print(`resources/read ${first.uri}  → resource_read #${r.sequence_number} ${r.entry_hash.slice(0, 16)}…`);

  const prompt = await client.getPrompt({ name: 'everything.simple-prompt', ...inSession }, { signal });
  const p = evidenceOf(prompt, 'prompts/get', sessionId);
  print(
    `prompts/get everything.simple-prompt  → prompt_get #${p.sequence_number} ${p.entry_hash.slice(0, 16)}…  ${prompt.messages.length} message(s)`,
  );

  const progress: string[] = [];
  const result = await client.callTool(
    { name: 'everything.trigger-long-running-operation', arguments: { duration: 1, steps: 3 }, ...inSession },
    undefined,
    {
      signal,
      onprogress: (p) => {
        progress.push(`${p.progress}/${p.total ?? '?'}`);
      },
    },
  );
  const t = evidenceOf(result, 'tools/call', sessionId);
  if (progress.length !== 3)
    throw new Error(`expected 3 progress notifications, got ${progress.join(', ') || 'none'}`);
  print(
    `everything.trigger-long-running-operation  → tool_call #${t.sequence_number} ${t.entry_hash.slice(0, 16)}…  ${progress.length} progress notification(s) relayed (${progress.join(', ')})`,
  );
}
