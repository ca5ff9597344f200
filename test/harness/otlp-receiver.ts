/**
 * An OTLP/HTTP traces receiver (JSON encoding, OTLP spec "OTLP/HTTP") on 127.0.0.1 for the
 * tracing tests: keeps every request body, and decodes them into spans.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  kind?: number;
  /** Nanoseconds since the epoch, as decimal strings (OTLP JSON encodes 64-bit integers so). */
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  status?: { code?: number };
  attributes?: { key: string; value: OtlpValue }[];
}
export interface OtlpExport {
  resourceSpans: {
    resource: { attributes: { key: string; value: OtlpValue }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

export interface OtlpReceiver {
  /** The traces endpoint, `http://127.0.0.1:PORT/v1/traces`. */
  url: string;
  bodies: string[];
  server: Server;
  /** Every span of every export received so far. */
  spans(): OtlpSpan[];
  close(): Promise<void>;
}

/** Starts the receiver: POST /v1/traces with `application/json` is kept, anything else is 415. */
export async function startReceiver(): Promise<OtlpReceiver> {
  const bodies: string[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (
      req.method === 'POST' &&
      req.url === '/v1/traces' &&
      req.headers['content-type'] === 'application/json'
    ) {
      bodies.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      return;
    }
    res.writeHead(415).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    bodies,
    server,
    spans: () =>
      bodies
        .map((b) => JSON.parse(b) as OtlpExport)
        .flatMap((e) => e.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans))),
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/** A string attribute of `span`, undefined when absent. */
export const attr = (span: OtlpSpan, key: string): string | undefined =>
  span.attributes?.find((a) => a.key === key)?.value.stringValue;
