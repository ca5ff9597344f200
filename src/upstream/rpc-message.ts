/**
 * The message an upstream put in its JSON-RPC error (JSON-RPC 2.0 §5.1 `error.message`). The
 * MCP SDK client turns an error response into an `McpError` whose `message` is
 * "MCP error <code>: <message>"; relaying that would add the prefix again at every gateway hop
 * (and the client's own SDK adds it once more). The upstream's message passes through as it came.
 */
import type { McpError } from '@modelcontextprotocol/sdk/types.js';

/** `e.message` without the one "MCP error <code>: " prefix the SDK's McpError constructor added. */
export function upstreamRpcMessage(e: McpError): string {
  const prefix = `MCP error ${e.code}: `;
  return e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message;
}
