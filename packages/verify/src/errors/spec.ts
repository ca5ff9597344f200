/** One registered error (the registry itself is errors/index.ts). */
export interface ErrorSpec {
  /** HTTP status when the error is returned outside JSON-RPC (REST routes, transport). */
  http: number;
  /** JSON-RPC error code when returned inside a JSON-RPC response. */
  rpc: number;
  /** One-line meaning, for docs. */
  summary: string;
}
