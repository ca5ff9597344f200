/**
 * Reading an upstream's HTTP answer as MCP messages, for the gateway's own Streamable HTTP
 * client transport (./http-transport.ts): a `text/event-stream` body (WHATWG HTML §9.2
 * "Server-sent events", parsed by eventsource-parser's callback parser) or a JSON body, from
 * undici's Node stream. Bytes are decoded with one `StringDecoder`, which keeps a UTF-8 sequence
 * split between two reads whole; the parser keeps an event split between reads, and any
 * line ending (LF, CRLF, CR). No web streams: their pipeline per response was most of what the
 * SDK's transport cost a streamed call (BENCHMARKS.md, relayed progress).
 */
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { createParser } from 'eventsource-parser';
import { CmcpError } from '../errors/index.js';
import { type CallContext, ResultTooLargeError } from './result-cap.js';

/** Why a body was not a JSON-RPC 2.0 message (JSON-RPC 2.0 §4–5). */
export class UpstreamMessageError extends CmcpError {
  declare readonly code: 'UPSTREAM_FAILED';
  constructor(message: string) {
    super('UPSTREAM_FAILED', message);
    this.name = 'UpstreamMessageError';
  }
}

const isId = (v: unknown) => typeof v === 'string' || (typeof v === 'number' && Number.isInteger(v));
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The shape of a JSON-RPC 2.0 request, notification, result or error (JSON-RPC 2.0 §4, §5; the
 * SDK's JSONRPCMessageSchema without its zod parse, ~17 µs a message). The SDK's Protocol checks
 * each message against its own schemas again and reports one it cannot place.
 * @throws UpstreamMessageError naming what is missing.
 */
export function asJsonRpcMessage(v: unknown): JSONRPCMessage {
  if (!isObject(v) || v.jsonrpc !== '2.0') throw new UpstreamMessageError('not a JSON-RPC 2.0 message');
  if ('method' in v) {
    if (typeof v.method !== 'string') throw new UpstreamMessageError('JSON-RPC method is not a string');
    if ('id' in v && !isId(v.id)) throw new UpstreamMessageError('JSON-RPC id is not a string or integer');
    if ('params' in v && !isObject(v.params))
      throw new UpstreamMessageError('JSON-RPC params is not an object');
    return v as JSONRPCMessage;
  }
  if ('result' in v) {
    if (!isId(v.id) || !isObject(v.result)) throw new UpstreamMessageError('malformed JSON-RPC result');
    return v as JSONRPCMessage;
  }
  const e = v.error;
  if (
    !isObject(e) ||
    !Number.isInteger(e.code) ||
    typeof e.message !== 'string' ||
    ('id' in v && !isId(v.id))
  )
    throw new UpstreamMessageError('malformed JSON-RPC error');
  return v as JSONRPCMessage;
}

/** The messages of a JSON body: one message or an array of them (JSON-RPC 2.0 §6). @throws on bad JSON. */
export function jsonMessages(text: string): JSONRPCMessage[] {
  const data: unknown = JSON.parse(text);
  return Array.isArray(data) ? data.map(asJsonRpcMessage) : [asJsonRpcMessage(data)];
}

/** The result cap of one POST's response (C-MCP-4), and the call it belongs to. */
export interface BodyCap {
  bytes: number;
  ctx: CallContext | undefined;
  onOverflow: (ctx: CallContext | undefined) => void;
}

/** The first string `code` along an error's cause chain (ECONNRESET, UND_ERR_SOCKET, …). */
export function errorCode(e: unknown): string {
  let cur: unknown = e;
  for (let i = 0; i < 5 && cur; i++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string') return c;
    cur = (cur as { cause?: unknown }).cause;
  }
  return 'transport error';
}

/**
 * A whole (non-streamed) body read at once up to the cap: past it the connection is destroyed
 * (the rest is not drained), `onOverflow` is told and the read fails; a connection lost before
 * the end fails the call at once.
 * @throws ResultTooLargeError past the cap; the connection's error when it broke off.
 */
export function readWhole(body: Readable, cap: BodyCap | undefined): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let seen = 0;
    body.on('data', (chunk: Buffer) => {
      seen += chunk.byteLength;
      if (cap && seen > cap.bytes) {
        cap.onOverflow(cap.ctx);
        body.destroy();
        reject(new ResultTooLargeError(`response exceeds ${cap.bytes} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    body.once('end', () =>
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, seen)),
    );
    body.once('error', (e) => {
      cap?.ctx?.fail?.(`connection lost: ${errorCode(e)}`);
      reject(e);
    });
  });
}

/** What one event stream delivers to, and how it ended. */
export interface EventSink {
  /** Each JSON-RPC message of a `message` event (an event without `event:` is one), in order. */
  message(m: JSONRPCMessage): void;
  /** An event's data that is not a JSON-RPC message (the stream goes on). */
  invalid(e: Error): void;
  /** Each event id (the resumption point, `Last-Event-ID`). */
  eventId?(id: string): void;
  /** The `retry:` field, ms. */
  retry?(ms: number): void;
}

/** How an event stream ended: cleanly, broken off (with the error), or cut at the cap. */
export type StreamEnd = { end: 'ended' } | { end: 'broken'; error: unknown } | { end: 'capped' };

/** Bytes an event's framing (`event:`, `id:`, `data: ` prefixes, line ends) may add to its data under the cap. */
const EVENT_FRAMING_SLACK = 4096;

/**
 * Reads one `text/event-stream` body to its end, handing each message to `sink` as its event
 * completes (comments and events without data, such as keep-alives, deliver nothing). With
 * `cap`, each single event is bounded (C-MCP-4, as one stdio line is): an event whose data
 * passes the cap, or raw bytes since the last complete event that pass the cap and
 * {@link EVENT_FRAMING_SLACK}, stop the read (the connection is destroyed, `onOverflow` told).
 * Many events under the cap (progress, logs before a small result) pass whatever their sum;
 * memory stays bounded by the cap plus one read chunk.
 * @returns how the stream ended; never rejects.
 */
export function readEventStream(body: Readable, sink: EventSink, cap?: BodyCap): Promise<StreamEnd> {
  const decoder = new StringDecoder('utf8');
  let sinceEvent = 0;
  let over = false;
  const parser = createParser({
    onEvent(ev) {
      // The rest of the chunk that completed this event is not counted: the parser holds at most
      // the cap, the slack and one read chunk.
      sinceEvent = 0;
      if (over) return;
      if (ev.id) sink.eventId?.(ev.id);
      if (!ev.data || (ev.event !== undefined && ev.event !== 'message')) return;
      if (cap && ev.data.length > cap.bytes / 3 && Buffer.byteLength(ev.data) > cap.bytes) {
        over = true;
        return;
      }
      try {
        sink.message(asJsonRpcMessage(JSON.parse(ev.data)));
      } catch (e) {
        sink.invalid(e as Error);
      }
    },
    onRetry: (ms) => sink.retry?.(ms),
  });
  return new Promise((resolve) => {
    let done = false;
    const finish = (how: StreamEnd) => {
      if (done) return;
      done = true;
      resolve(how);
    };
    const capped = () => {
      if (!cap) return;
      cap.onOverflow(cap.ctx);
      body.destroy();
      finish({ end: 'capped' });
    };
    body.on('data', (chunk: Buffer) => {
      if (done) return;
      sinceEvent += chunk.byteLength;
      // Checked after the feed: a chunk may complete many small events (the count restarts).
      parser.feed(decoder.write(chunk));
      if (over || (cap && sinceEvent > cap.bytes + EVENT_FRAMING_SLACK)) capped();
    });
    body.once('end', () => {
      if (done) return;
      parser.feed(decoder.end());
      if (over) capped();
      else finish({ end: 'ended' });
    });
    body.once('error', (error) => finish({ end: 'broken', error }));
    // Destroyed without an error (the transport closing): nothing more will come.
    body.once('close', () => finish({ end: 'broken', error: new Error('event stream closed') }));
  });
}
