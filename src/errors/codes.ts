/**
 * The gateway's own error codes: JSON-RPC framing, authentication, sessions, policy, the call
 * path, upstreams, the store, replicas, limits, and the start-up and CLI faults of its error
 * classes. Each is stable, upper-snake, and carries an HTTP status (for non-JSON-RPC routes)
 * and a JSON-RPC code; ./index.ts registers them next to the verifier's and native/'s.
 *
 * JSON-RPC codes: -32700..-32600 are JSON-RPC 2.0 §5.1; cmcp's own codes live in the
 * implementation-defined server-error range -32000..-32099.
 */
import type { ErrorSpec } from '@cmcp/verify/errors';

export const GATEWAY_ERRORS = {
  PARSE_ERROR: { http: 400, rpc: -32700, summary: 'The body is not valid JSON.' },
  INVALID_REQUEST: { http: 400, rpc: -32600, summary: 'Not a valid JSON-RPC 2.0 request (or id is null).' },
  BATCH_NOT_SUPPORTED: { http: 400, rpc: -32600, summary: 'JSON-RPC batches are refused.' },
  METHOD_NOT_FOUND: { http: 404, rpc: -32601, summary: 'The JSON-RPC method is not served by the gateway.' },
  INVALID_PARAMS: {
    http: 400,
    rpc: -32602,
    summary: 'Params are malformed (e.g. integers outside ±(2^53−1), lone surrogates, unknown _cmcp fields).',
  },
  INTERNAL_ERROR: {
    http: 500,
    rpc: -32603,
    summary: 'An internal fault; details are in the server log only.',
  },
  UNAUTHENTICATED: { http: 401, rpc: -32001, summary: 'Missing or unknown bearer token.' },
  OAUTH_TOKEN_REFUSED: {
    http: 401,
    rpc: -32001,
    summary:
      'A JWT access token was refused (expired, wrong iss or aud, algorithm not allowed, bad signature, unknown kid, JWKS unavailable); the agent is answered UNAUTHENTICATED with error="invalid_token", the reason is logged.',
  },
  PAYLOAD_TOO_LARGE: { http: 413, rpc: -32002, summary: 'The request body exceeds the configured limit.' },
  UNSUPPORTED_MEDIA_TYPE: { http: 415, rpc: -32003, summary: 'Content-Type must be application/json.' },
  GATEWAY_SHUTTING_DOWN: {
    http: 503,
    rpc: -32005,
    summary:
      'The gateway is shutting down (SIGTERM/SIGINT) and admits no new request; send it to a running gateway.',
  },
  HOST_NOT_ALLOWED: {
    http: 403,
    rpc: -32004,
    summary:
      'The Host header (or the Origin header, when sent) names no allowed host (listen.allowed_hosts): DNS-rebinding protection, before authentication.',
  },
  REQUEST_CANCELLED: {
    http: 400,
    rpc: -32041,
    summary:
      'The client cancelled the request (notifications/cancelled) or disconnected before it was answered.',
  },
  CLIENT_REQUEST_FAILED: {
    http: 502,
    rpc: -32044,
    summary:
      'The client answered a server-to-client request (sampling, elicitation, roots) with a JSON-RPC error; its code is in data.rpc_code.',
  },
  UNKNOWN_CLIENT_SESSION: {
    http: 404,
    rpc: -32013,
    summary: 'The Mcp-Session-Id is unknown, expired or ended (DELETE /mcp); initialize again.',
  },
  UNKNOWN_SESSION: {
    http: 404,
    rpc: -32010,
    summary: 'No open session with this id belongs to the authenticated agent.',
  },
  SESSION_OPEN: { http: 409, rpc: -32012, summary: 'The session is still open; it has no claim yet.' },
  SESSION_CLOSED: { http: 409, rpc: -32011, summary: 'The session is closed; open a new one.' },
  LIST_CURSOR_INVALID: {
    http: 400,
    rpc: -32602,
    summary:
      'A list cursor the gateway did not issue for this list: altered, from another gateway process or list method, or expired.',
  },
  RESOURCE_NOT_ROUTED: {
    http: 404,
    rpc: -32002,
    summary:
      'No single upstream serves this resource URI (none listed it or a template of it, or two upstreams claim it).',
  },
  PROMPT_NOT_FOUND: { http: 404, rpc: -32602, summary: 'No upstream offers a prompt of this gateway name.' },
  UPSTREAM_METHOD_UNSUPPORTED: {
    http: 404,
    rpc: -32601,
    summary: 'No configured upstream offers this MCP method (its capability is not advertised).',
  },
  CLIENT_CHANNEL_UNAVAILABLE: {
    http: 406,
    rpc: -32043,
    summary:
      'A server-to-client request could not reach the client (it accepts only application/json, or it disconnected).',
  },
  STREAM_REPLAY_UNAVAILABLE: {
    http: 409,
    rpc: -32046,
    summary:
      'A Last-Event-ID names an unknown or ended stream, or events that no longer fit its replay buffer: what was missed cannot be replayed.',
  },
  CLIENT_RPC_ERROR: {
    http: 502,
    rpc: -32041,
    summary:
      'The client answered a relayed server-to-client request with a JSON-RPC error; its code and message go to the upstream (completed).',
  },
  UNKNOWN_TOOL: { http: 404, rpc: -32020, summary: 'No upstream tool has this name.' },
  UPSTREAM_UNAVAILABLE: {
    http: 502,
    rpc: -32030,
    summary: 'The upstream could not be reached; the request was not sent (not_attempted).',
  },
  UPSTREAM_FAILED: {
    http: 502,
    rpc: -32031,
    summary: 'The upstream failed after the request may have left (timeout, reset): outcome unknown.',
  },
  UPSTREAM_RPC_ERROR: {
    http: 502,
    rpc: -32033,
    summary: 'The upstream answered with a JSON-RPC error; its own code and message are relayed (completed).',
  },
  UPSTREAM_RESULT_TOO_LARGE: {
    http: 502,
    rpc: -32032,
    summary: 'The upstream result exceeded the size cap.',
  },
  CALL_INTERRUPTED: {
    http: 502,
    rpc: -32034,
    summary:
      'The gateway stopped (a crash, or a shutdown past the drain time) while the call was at the upstream: outcome unknown, recorded at recovery.',
  },
  AUDIT_WRITE_FAILED: {
    http: 500,
    rpc: -32040,
    summary: 'The terminal audit entry could not be committed; the outcome is not recorded.',
  },
  AUDIT_CURSOR_UNKNOWN: {
    http: 400,
    rpc: -32602,
    summary:
      'An audit export cursor is malformed, or names no stored entry (another database, or one restored from an older backup): the export does not guess where to resume.',
  },
  EXECUTION_ID_INVALID: {
    http: 400,
    rpc: -32050,
    summary: 'params._cmcp.execution_id is present but not 1–200 characters in 0x21–0x7E.',
  },
  EXECUTION_COLLISION: {
    http: 409,
    rpc: -32051,
    summary: 'This execution_id is bound to a different action (any state).',
  },
  EXECUTION_IN_FLIGHT: {
    http: 409,
    rpc: -32052,
    summary: 'The same action under this execution_id is running.',
  },
  EXECUTION_REPLAY_REFUSED: {
    http: 409,
    rpc: -32053,
    summary: 'This execution_id reached a terminal state; it is never run again.',
  },
  EXECUTION_NOT_FOUND: {
    http: 404,
    rpc: -32054,
    summary: 'No execution with this id for the authenticated agent.',
  },
  TOOL_NOT_IN_CATALOG: {
    http: 404,
    rpc: -32021,
    summary: 'A catalog is configured and this tool is not pinned in it.',
  },
  CATALOG_DRIFT: {
    http: 409,
    rpc: -32022,
    summary:
      "The upstream's live definition of this tool differs from its catalog pin (or the tool is gone); only this tool is blocked.",
  },
  POLICY_DENY: {
    http: 403,
    rpc: -32060,
    summary: 'The Cedar policy denied the call (enforcing mode); data.policy_ids names the matched policies.',
  },
  POLICY_EVALUATION_FAILED: {
    http: 403,
    rpc: -32061,
    summary:
      'The call could not be evaluated (a policy errored, or the request cannot be expressed in Cedar); refused, fail closed.',
  },
  POLICY_ATTRIBUTE_INVALID: {
    http: 403,
    rpc: -32065,
    summary:
      "An attribute of the request that the policy bundle's Cedar schema declares and a policy can read (a token claim, a configured agent attribute, an argument a policy reads) does not conform to that schema, or carries a Cedar escape member (__entity, __extn, __expr); a deny, refused when enforcing; data.policy_attribute_invalid names the attribute path, the schema type and the JSON type, never a value.",
  },
  POLICY_BUNDLE_INVALID: {
    http: 400,
    rpc: -32062,
    summary: "The policy bundle failed to load; Cedar's diagnostics are listed.",
  },
  POLICY_RELOAD_REFUSED: {
    http: 409,
    rpc: -32063,
    summary:
      'A policy reload was refused (unsigned, bad signature, not a higher version, no policy key, or an invalid bundle); data.reason says which.',
  },
  CATALOG_INVALID: {
    http: 400,
    rpc: -32064,
    summary:
      'The catalog file is unreadable, its pins do not hold, or a tool name holds a control, invisible or direction-changing character (Unicode Cc, Cf, U+2028, U+2029) or a lone surrogate.',
  },
  OPERATOR_UNAUTHENTICATED: {
    http: 401,
    rpc: -32070,
    summary: 'Operator routes need an operator token; agent tokens are refused there.',
  },
  OPERATOR_CREDENTIAL_REFUSED: {
    http: 403,
    rpc: -32071,
    summary: 'An operator token was presented on an agent route; operator credentials never act as agents.',
  },
  AGENT_BLOCKED: {
    http: 403,
    rpc: -32072,
    summary: 'An operator blocked this agent identity (kill switch); every route refuses it.',
  },
  AGENT_NOT_FOUND: {
    http: 404,
    rpc: -32073,
    summary: 'No configured agent has this id.',
  },
  CONFIG_INVALID: { http: 500, rpc: -32603, summary: 'The configuration file failed validation.' },
  RELEASE_ARTIFACT_INVALID: {
    http: 400,
    rpc: -32603,
    summary:
      'A release artifact (`cmcp measure --release`, `cmcp verify --expect-release`) is unreadable, not a gzip tar, holds an entry outside its one top folder, or is not a cmcp release (no RELEASE file, no dist/src/cli/main.js).',
  },
  UPSTREAM_CREDENTIAL_UNAVAILABLE: {
    http: 500,
    rpc: -32603,
    summary:
      "An HTTP upstream's credential (header value from an environment variable or file, TLS certificate or key) cannot be read at start-up.",
  },
  NOT_FOUND: { http: 404, rpc: -32601, summary: 'No such route or resource.' },
  TLS_FILES_INVALID: {
    http: 500,
    rpc: -32603,
    summary:
      'The `tls.certificate` files cannot be used at start-up: unreadable, not a PEM private key, or the leaf certificate is not for that key.',
  },
  TLS_EVIDENCE_UNAVAILABLE: {
    http: 503,
    rpc: -32603,
    summary:
      "GET /.well-known/cmcp/tls-evidence before the listener's TLS key is bound (start-up, between listening and the first binding), or without TLS.",
  },
  // Codes of the gateway's own error classes (src/). Start-up, CLI and internal codes never
  // travel in a JSON-RPC response: they carry -32603 and a 500 (or the HTTP status that names
  // the fault) for completeness.
  CEDAR_VALUE_INVALID: {
    http: 400,
    rpc: -32602,
    summary:
      'A value cannot be carried into Cedar honestly (a reserved `__entity`/`__extn`/`__expr` member, or not JSON).',
  },
  POLICY_KEY_INVALID: {
    http: 500,
    rpc: -32603,
    summary: 'Start-up: the configured policy signing key is not an Ed25519 SPKI PEM or raw base64url key.',
  },
  TOOL_NAME_CLASH: {
    http: 500,
    rpc: -32603,
    summary: 'Start-up: two upstreams expose the same gateway tool name; set a prefix.',
  },
  INSTANCE_RUNNING: {
    http: 409,
    rpc: -32603,
    summary: 'Start-up: another live process holds this instance_id (one live process per instance).',
  },
  LEASE_LOST: {
    http: 503,
    rpc: -32603,
    summary:
      "PostgreSQL replicas: this replica's lease expired or was taken over (its fencing token is no longer the live one), so the write was refused and rolled back; the replica stops writing and must be restarted under a new lease (docs/replicas.md).",
  },
  DATABASE_SCHEMA_TOO_NEW: {
    http: 500,
    rpc: -32603,
    summary:
      'Start-up, `cmcp db migrate`, `cmcp db status` (after printing the version) or `cmcp executions`: the database has a schema version newer than this cmcp knows; nothing was written or read. Run the cmcp version that migrated it, or a newer one.',
  },
  POSTGRES_FEATURE_UNAVAILABLE: {
    http: 501,
    rpc: -32603,
    summary:
      'A replica serving on PostgreSQL (`database` a postgres:// URL) does not serve this yet (docs/replicas.md): at start-up `store.worker` (the SQLite store worker); while serving, the operator console. Nothing was forwarded or changed. Use a SQLite database for these.',
  },
  DATABASE_UNAVAILABLE: {
    http: 500,
    rpc: -32603,
    summary:
      '`cmcp db`: the database could not be opened or reached (no such file, not a database, connection refused, authentication failed); the message names why (exit code 2).',
  },
  ATTESTATION_UNAVAILABLE: {
    http: 500,
    rpc: -32603,
    summary: 'Start-up: the configured (or any auto-detected) attestation provider is not available.',
  },
  ATTESTATION_TIER_TOO_LOW: {
    http: 500,
    rpc: -32603,
    summary: 'Start-up: the selected attestation provider is below the configured minimum_tier.',
  },
  ATTESTATION_BINDING_FAILED: {
    http: 500,
    rpc: -32603,
    summary:
      'The attestation provider produced no evidence for a binding; `reason` names why (e.g. DEVICE_ABSENT, TPM_FAILED). The session serves with the binding absent.',
  },
  TPM_ENROLLMENT_REFUSED: {
    http: 500,
    rpc: -32603,
    summary:
      '`cmcp tpm enroll` (or reading its record) refused; `reason` names why (e.g. EK_CERT_UNTRUSTED, CREDENTIAL_MISMATCH).',
  },
  EAB_NOT_V1: {
    http: 400,
    rpc: -32602,
    summary: 'An execution action binding preimage is not version 1 (members, domain or version).',
  },
  EAB_UNSUPPORTED_ALGORITHM: {
    http: 400,
    rpc: -32602,
    summary: 'An execution action binding names a digest algorithm other than sha256 or sha384.',
  },
  EAB_MALFORMED: {
    http: 400,
    rpc: -32602,
    summary: 'A rendered execution action binding is not `<algorithm>:<hex>` of the right length.',
  },
  INJECTED_FAULT: {
    http: 500,
    rpc: -32603,
    summary:
      'Test seam (CMCP_FAULT_INJECT): a persistence fault injected on purpose; the gateway fails closed.',
  },
  STORE_BUSY: {
    http: 503,
    rpc: -32007,
    summary:
      "Another process held the database's write lock for longer than the busy timeout (5 s): the call was refused before it reached an upstream, and its refusal is recorded; retry later. (When not even the refusal could be written the answer is AUDIT_WRITE_FAILED.)",
  },
  STORE_QUEUE_FULL: {
    http: 503,
    rpc: -32006,
    summary:
      "The store worker's write queue is full (config store.max_queued_writes): the call was refused before its attempt was recorded, so no upstream was invoked; its refusal is recorded; retry later.",
  },
  STORE_WRITE_FAILED: {
    http: 503,
    rpc: -32007,
    summary:
      'The store could not commit a write (a full disk, an I/O error, a write lock held past the busy timeout, an unreachable PostgreSQL): nothing was changed; retry once /readyz is ready again.',
  },
  SESSION_BINDING_REQUIRED: {
    http: 503,
    rpc: -32080,
    summary:
      'The session could not be bound to hardware evidence at attestation.minimum_tier; it was closed, not served signed-only (on_unavailable: refuse).',
  },
  UPSTREAM_OFFLINE: {
    http: 503,
    rpc: -32034,
    summary:
      'The upstream has not been reachable since start-up; its tools are hidden and the call was not sent (retried with backoff).',
  },
  UPSTREAM_AUTHORIZATION_REQUIRED: {
    http: 503,
    rpc: -32038,
    summary:
      "The upstream needs an interactive authorization (a user's consent) that the gateway cannot perform; `data.authorization_url` is where the operator must go. Not sent; not retried, and the upstream is not reported down.",
  },
  URL_ELICITATION_REQUIRED: {
    http: 503,
    rpc: -32042,
    summary:
      "MCP's URLElicitationRequiredError, to a client that declared URL-mode elicitation: the upstream needs a user to authorize the gateway at the URL in `data.elicitations` (`data.reason` is UPSTREAM_AUTHORIZATION_REQUIRED, as recorded). Not sent; not retried.",
  },
  UPSTREAM_AUTHORIZATION_FAILED: {
    http: 502,
    rpc: -32039,
    summary:
      'The gateway could not get an access token the upstream accepts (discovery, registration or the token request failed, or the upstream refused the token): not sent. No token value is recorded.',
  },
  UPSTREAM_CLIENT_CONNECTIONS_FULL: {
    http: 503,
    rpc: -32035,
    summary:
      "The request needs the client session's own connection to the upstream (a log level, a subscription, a task, or a client that can be asked for sampling, elicitation or roots), and the upstream already has max_client_connections of them; end a client session (DELETE /mcp) or retry later. Not sent.",
  },
  // Bounded resources (docs/operations.md#limits-and-timeouts). Each is
  // recorded in the aggregated refusal record of the gateway chain.
  AGENT_RATE_LIMITED: {
    http: 429,
    rpc: -32090,
    summary:
      "The agent's request rate is over limits.agent_requests_per_s (burst limits.agent_request_burst); retry after Retry-After seconds.",
  },
  AGENT_TOO_MANY_IN_FLIGHT: {
    http: 429,
    rpc: -32091,
    summary: 'The agent already has limits.agent_max_in_flight requests in flight; retry when one has ended.',
  },
  AGENT_TOO_MANY_SESSIONS: {
    http: 429,
    rpc: -32092,
    summary: 'The agent already has limits.agent_max_open_sessions open sessions; close one first.',
  },
  CONNECTION_LIMIT_REACHED: {
    http: 503,
    rpc: -32093,
    summary:
      'The gateway holds limits.max_connections connections; a new connection is closed at once, without an answer.',
  },
  REQUEST_HEADERS_TIMEOUT: {
    http: 408,
    rpc: -32094,
    summary:
      "The request's headers did not arrive within limits.headers_timeout_ms; the connection is closed.",
  },
  REQUEST_BODY_TIMEOUT: {
    http: 408,
    rpc: -32095,
    summary:
      'The whole request (headers and body) did not arrive within limits.request_timeout_ms; the connection is closed.',
  },
  AGENT_CLIENT_SESSIONS_RATE_LIMITED: {
    http: 429,
    rpc: -32096,
    summary:
      'The agent opened limits.agent_client_sessions_per_min client sessions (initialize, each recorded client_session_open) in the last minute; retry after Retry-After seconds.',
  },
  UNAUTHENTICATED_CONNECTION_LIMIT: {
    http: 503,
    rpc: -32097,
    summary:
      'The gateway holds limits.max_unauthenticated_connections connections that have not authenticated (or limits.max_unauthenticated_per_address from one address, an IPv6 address counted by its /64); an older one is closed, without an answer (idle before busy, never the new one).',
  },
  UNAUTHENTICATED_CONNECTION_TIMEOUT: {
    http: 408,
    rpc: -32098,
    summary:
      'No request on the connection authenticated within limits.unauthenticated_timeout_ms, busy or not (a request still being received, such as a slow body); the connection is closed, without an answer, or after a short grace when a complete request is being answered.',
  },
  UPSTREAM_NOTIFICATIONS_LIMITED: {
    http: 429,
    rpc: -32099,
    summary:
      'An upstream sent a client more notifications than limits.upstream_notifications_per_s / upstream_notification_bytes_per_s (with their bursts) allow, per client and upstream (progress: per request); the excess was not sent (log messages and progress dropped; a list change or resource update merged into the one kept pending and delivered once the bucket refills) and is counted in the aggregated refusal record.',
  },
} as const satisfies Record<string, ErrorSpec>;
