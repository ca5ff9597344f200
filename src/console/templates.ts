/**
 * The console's Eta templates (views.ts loads them by name). Kept as strings in a module, not
 * files, so they ship inside dist/ with the code. Only `<%= %>` (escaped) interpolates data;
 * the layout's `<%~ it.body %>` inserts a body Eta rendered from these templates.
 */
export const TEMPLATES = {
  layout: `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title><%= it.title %> · cmcp operator console</title>
<link rel="stylesheet" href="<%= it.base %>/console.css"><link rel="icon" href="<%= it.base %>/favicon.svg"></head>
<body><header><strong>cmcp operator console</strong>
<% if (it.nav) { %>
<nav><a href="<%= it.base %>/">overview</a> · <a href="<%= it.href('sessions') %>">sessions</a> ·
<a href="<%= it.href('executions') %>">executions</a> · <a href="<%= it.href('refusals') %>">refusals</a> ·
<a href="<%= it.href('search') %>">search</a> · <a href="<%= it.href('upstreams') %>">upstreams</a> · <a href="<%= it.href('policy') %>">policy</a> · <a href="<%= it.href('agents') %>">agents</a></nav>
<span data-operator><%= it.nav.operatorId %></span>
<form class="inline" method="post" action="<%= it.href('logout') %>">
<input type="hidden" name="_csrf" value="<%= it.nav.csrf %>"><button type="submit">log out</button></form>
<% } %>
</header><main><h1><%= it.title %></h1>
<%~ it.body %>
</main></body></html>`,

  login: `<form method="post" action="<%= it.href('login') %>" id="login">
<% if (it.refused) { %><p class="error" data-login-refused>login refused: not an operator token</p><% } %>
<label>operator token <input type="password" name="token" autocomplete="off" required></label>
<button type="submit">log in</button></form>`,

  overview: `<section data-section="running"><h2>Running</h2><table>
<tr><th>policy bundle hash</th><td data-policy-hash><% if (it.policyHash) { %><code><%= it.policyHash %></code><% } else { %>none<% } %></td></tr>
<tr><th>policy version</th><td><%= it.policyVersion %></td></tr>
<tr><th>enforcement mode</th><td><%= it.mode %></td></tr>
<tr><th>catalog hash</th><td data-catalog-hash><% if (it.catalogHash) { %><code><%= it.catalogHash %></code><% } else { %>none<% } %></td></tr>
<tr><th>catalog tools</th><td><%= it.catalogTools %></td></tr>
</table></section>
<section data-section="drifted"><h2>Drifted tools</h2>
<% if (it.drifted.length) { %><ul><% it.drifted.forEach(function (d) { %><li data-drifted><code><%= d %></code></li><% }) %></ul><% } else { %><p>none</p><% } %>
</section>
<section data-section="blocked"><h2>Blocked agents</h2>
<% if (it.blocked.length) { %><ul><% it.blocked.forEach(function (a) { %><li data-blocked-agent="<%= a %>"><%= a %></li><% }) %></ul><% } else { %><p>none</p><% } %>
</section>
<section data-section="counts"><h2>Recent</h2><table>
<% it.counts.forEach(function (c) { %><tr><th><%= c[0] %></th><td><%= c[1] %></td></tr><% }) %>
</table></section>`,

  sessions: `<table data-section="sessions">
<tr><th>session</th><th>agent</th><th>status</th><th>created</th><th>calls</th><th>chain root</th><th>claim</th></tr>
<% it.rows.forEach(function (s) { %><tr data-session="<%= s.session_id %>">
<td><a href="<%= it.href('sessions', s.session_id) %>"><%= s.session_id %></a></td>
<td><%= s.agent_id %></td><td><%= s.status %></td><td><%= s.created_at %></td><td><%= s.call_count %></td>
<td><code><%= s.chain_root %></code></td>
<td><% if (s.status === 'closed') { %><a href="<%= it.href('sessions', s.session_id, 'claim') %>">claim</a><% } else { %>—<% } %></td>
</tr><% }) %></table>`,

  chain: `<p>agent <span data-agent><%= it.session.agent_id %></span>, <%= it.session.status %>
<% if (it.session.status === 'closed') { %> · <a href="<%= it.href('sessions', it.session.session_id, 'claim') %>" data-claim-link>claim and verification</a><% } %>
 · <a href="<%= it.href('sessions', it.session.session_id, 'bundle') %>" data-bundle-link download>download the audit bundle</a></p>
<table data-section="chain">
<tr><th>#</th><th>time</th><th>type</th><th>tool</th><th>execution_id</th><th>decision</th><th>rule</th><th>disposition</th><th>error</th><th>entry hash</th></tr>
<% it.entries.forEach(function (e) { %><tr data-entry="<%= e.entry_type %>">
<td><%= e.sequence_number %></td><td><%= e.timestamp_utc %></td><td><%= e.entry_type %></td>
<td data-tool><%= e.tool_name ?? '' %></td><td data-execution><%= e.execution_id ?? '' %></td>
<td data-decision><%= e.policy_decision ?? '' %></td><td data-rule><%= (e.policy_rule_matched ?? []).join(', ') %></td><td><%= e.disposition ?? '' %></td><td><%= e.error_code ?? '' %></td>
<td><code><%= e.entry_hash %></code></td></tr><% }) %></table>`,

  claim: `<p><a href="<%= it.href('sessions', it.sessionId) %>">back to the chain</a></p>
<p>verdict: <span class="verdict" data-verdict="<%= it.report.verdict %>"><%= it.report.verdict %></span></p>
<p>signer: <span data-signer="<%= it.report.signer ?? '' %>"<% if (it.report.signer === 'self-asserted') { %> class="error"<% } %>><%= it.report.signer ?? 'not reported' %></span><% if (it.report.signer === 'self-asserted') { %> <strong class="error" data-self-asserted>SELF-ASSERTED: nothing but the claim vouches for its key; anyone could have signed it</strong><% } %></p>
<p>accepted: <span data-accepted="<%= it.report.accepted === true ? 'yes' : 'no' %>" class="<%= it.report.accepted === true ? 'pass' : 'error' %>"><%= it.report.accepted === true ? 'yes' : 'NO' %></span><% if (it.report.required) { %> (requires <%= it.report.required %> or a pinned key)<% } %></p>
<% if (it.trustNote) { %><p class="error"><%= it.trustNote %></p><% } %>
<table data-section="checks"><tr><th>check</th><th>status</th><th>reason</th><th>detail</th></tr>
<% it.report.checks.forEach(function (c) { %><tr data-check="<%= c.id %>" data-status="<%= c.status %>">
<td><code><%= c.id %></code></td><td class="<%= c.status %>"><%= c.status %></td><td><%= c.reason_code %></td><td><%= c.detail %></td></tr><% }) %>
</table>
<% if (it.report.notes.length) { %><ul><% it.report.notes.forEach(function (n) { %><li><%= n %></li><% }) %></ul><% } %>
<h2>Claim</h2><pre data-claim><code><%= it.claimJson %></code></pre>`,

  executions: `<table data-section="executions">
<tr><th>agent</th><th>execution_id</th><th>state</th><th>tool</th><th>session</th><th>created</th><th>updated</th></tr>
<% it.rows.forEach(function (r) { %><tr data-execution-state="<%= r.state %>">
<td><%= r.agent_id %></td><td data-execution><%= r.execution_id %></td><td><%= r.state %></td><td><%= r.tool_name %></td>
<td><a href="<%= it.href('sessions', r.session_id) %>"><%= r.session_id %></a></td><td><%= r.created_at %></td><td><%= r.updated_at %></td>
</tr><% }) %></table>`,

  refusals: `<p>per <%= it.size %> ·
<a href="<%= it.href('refusals') %>?bucket=minute">last hour per minute</a> ·
<a href="<%= it.href('refusals') %>?bucket=hour">last 48 hours per hour</a></p>
<% if (!it.buckets.length) { %><p>no refusals in this window</p><% } else { %>
<table data-section="refusals"><tr><th>from (UTC)</th><% it.codes.forEach(function (c) { %><th data-code="<%= c %>"><%= c %></th><% }) %></tr>
<% it.buckets.forEach(function (b) { %><tr data-bucket="<%= b.start %>"><td><%= b.start %></td>
<% it.codes.forEach(function (c) { %><td data-count="<%= c %>"><%= b.counts[c] ?? 0 %></td><% }) %></tr><% }) %>
</table><% } %>
<h2>Policy denials</h2>
<% if (!it.denials.length) { %><p>no policy denials in this window</p><% } else { %>
<table data-section="denials"><tr><th>time (UTC)</th><th>agent</th><th>tool</th><th>code</th><th>rule</th><th>session</th></tr>
<% it.denials.forEach(function (d) { %><tr data-denial="<%= d.code %>">
<td><%= d.at %></td><td data-agent><%= d.agentId %></td><td data-tool><%= d.tool ?? '' %></td><td><%= d.code %></td>
<td data-rule><%= d.rules.length ? d.rules.join(', ') : '(none matched)' %></td>
<td><% if (d.sessionId) { %><a href="<%= it.href('sessions', d.sessionId) %>"><%= d.sessionId %></a><% } else { %>gateway<% } %></td>
</tr><% }) %></table><% } %>`,

  agents: `<table data-section="agents"><tr><th>agent</th><th>state</th><th>action</th></tr>
<% it.agents.forEach(function (a) { %><tr data-agent-row="<%= a.id %>" data-blocked="<%= a.blocked %>">
<td><%= a.id %></td><td><%= a.blocked ? 'blocked' : 'active' %></td>
<td><form method="post" action="<%= it.href('agents', a.id, a.blocked ? 'unblock' : 'block') %>">
<input type="hidden" name="_csrf" value="<%= it.csrf %>">
<% if (!a.blocked) { %><input name="reason" maxlength="200" placeholder="reason"><% } %>
<button type="submit"><%= a.blocked ? 'unblock' : 'block' %></button></form></td></tr><% }) %>
</table>`,

  upstreams: `<% if (!it.rows.length) { %><p>no upstreams configured</p><% } else { %>
<table data-section="upstreams"><tr><th>upstream</th><th>state</th><th>since</th><th>attempts</th><th>why</th><th>authorization URL</th></tr>
<% it.rows.forEach(function (u) { %><tr data-upstream="<%= u.name %>" data-state="<%= u.state %>">
<td><%= u.name %></td><td class="<%= u.state === 'available' ? 'pass' : 'error' %>"><%= u.state %></td>
<td><%= u.since ?? '' %></td><td><%= u.attempts ?? '' %></td><td><%= u.summary ?? '' %></td>
<td><% if (u.authorizationUrl) { %><code data-authorization-url><%= u.authorizationUrl %></code><% } %></td></tr><% }) %>
</table><% } %>`,

  search: `<form method="get" action="<%= it.href('search') %>" id="search">
<label>agent <input name="agent" maxlength="200" value="<%= it.form.agent %>"></label>
<label>tool <input name="tool" maxlength="200" value="<%= it.form.tool %>"></label>
<label>disposition <select name="disposition"><option value="">any</option>
<% it.dispositions.forEach(function (d) { %><option value="<%= d %>"<% if (d === it.form.disposition) { %> selected<% } %>><%= d %></option><% }) %></select></label>
<label>from (UTC) <input type="datetime-local" step="1" name="from" value="<%= it.form.from %>"></label>
<label>to (UTC) <input type="datetime-local" step="1" name="to" value="<%= it.form.to %>"></label>
<button type="submit">search</button></form>
<% if (it.entries) { %><p data-result-count="<%= it.entries.length %>"><%= it.entries.length %> entries<% if (it.entries.length >= it.limit) { %> (the newest <%= it.limit %>; narrow the search)<% } %></p>
<table data-section="results"><tr><th>time (UTC)</th><th>chain</th><th>type</th><th>agent</th><th>tool</th><th>decision</th><th>rule</th><th>disposition</th><th>error</th></tr>
<% it.entries.forEach(function (e) { %><tr data-result="<%= e.entry_type %>">
<td><%= e.timestamp_utc %></td>
<td><% if (e.session_id && e.chain_id === e.session_id) { %><a href="<%= it.href('sessions', e.session_id) %>"><%= e.chain_id %></a><% } else { %><%= e.chain_id %><% } %></td>
<td><%= e.entry_type %></td><td data-agent><%= e.agent_id ?? '' %></td><td data-tool><%= e.tool_name ?? '' %></td>
<td><%= e.policy_decision ?? '' %></td><td data-rule><%= (e.policy_rule_matched ?? []).join(', ') %></td>
<td data-disposition><%= e.disposition ?? '' %></td><td><%= e.error_code ?? '' %></td></tr><% }) %></table><% } %>`,

  policy: `<p>running bundle <code data-policy-hash><%= it.hash ?? 'none' %></code>, version <span data-policy-version><%= it.version %></span></p>
<% if (it.refused) { %><p class="error" data-reload-refused><%= it.refused %></p><% } %>
<% if (it.installed) { %><p class="pass" data-reload-installed>installed</p><pre><code><%= it.installed %></code></pre><% } %>
<h2>Reload a signed bundle</h2>
<p>The request <code>cmcp policy reload</code> posts: <code>{"files": {"name": "base64url"}, "signature": "…"}</code>
(signature from <code>cmcp policy sign</code>). The gateway checks the signature against the pinned key, that the version is higher, and the bundle itself; a refusal is recorded.</p>
<form method="post" action="<%= it.href('policy', 'reload') %>" id="reload">
<input type="hidden" name="_csrf" value="<%= it.csrf %>">
<textarea name="request" rows="10" cols="100" required></textarea><br>
<button type="submit">reload</button></form>`,

  message: `<p class="error" data-message><%= it.text %></p>`,
} as const;
