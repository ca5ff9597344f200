/**
 * Server-Sent Events framing of JSON-RPC messages on a raw Node response (MCP Streamable HTTP,
 * "Sending Messages to the Server" §5; WHATWG HTML §9.2 event streams). The frame is the one the
 * official SDK's server transport writes (`event: message`, one `data:` line); the SDK keeps
 * its writer private, so it is restated here. JSON.stringify never emits a line break, so a
 * message of any size is exactly one `data:` line: large results pass intact.
 */
import type { ServerResponse } from 'node:http';

function writeStreamHead(raw: ServerResponse, headers: Record<string, string>): void {
  raw.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    ...headers,
  });
}

/**
 * Writes the 200 response head of an event stream (unless already written).
 * @param headers extra headers (e.g. `Mcp-Session-Id`).
 */
export function openEventStream(raw: ServerResponse, headers: Record<string, string> = {}): void {
  if (raw.headersSent) return;
  writeStreamHead(raw, headers);
  // Send the head now: a client waiting on a long call learns the stream is open.
  raw.flushHeaders();
}

/** One JSON-RPC message as one SSE event (`event: message`, one `data:` line). */
export function eventFrame(message: Record<string, unknown>): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}

/**
 * Writes one JSON-RPC message as one SSE event.
 * @returns false when the response is no longer writable (client gone).
 */
export function writeEvent(raw: ServerResponse, message: Record<string, unknown>): boolean {
  if (raw.writableEnded || raw.destroyed) return false;
  raw.write(eventFrame(message));
  return true;
}

/** A comment line that keeps intermediaries from closing an idle standalone stream. */
export function writeKeepAlive(raw: ServerResponse): void {
  if (!raw.writableEnded && !raw.destroyed) raw.write(': keep-alive\n\n');
}
