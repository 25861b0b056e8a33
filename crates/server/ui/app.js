// Capstan web UI: a small single-page application over the JSON API (docs/server.md).
// No framework and no build step: pages are rendered from template strings (every value escaped),
// events are delegated, and live updates come from server-sent events.

const $main = document.getElementById('main');
const $alert = document.getElementById('alert');
const $topbar = document.getElementById('topbar');

const state = {
  user: null,
  csrf: null,
  apps: new Map(), // name -> ApplicationSummary
  listStream: null,
  appStream: null,
  filters: { search: '', project: '', cluster: '', namespace: '', sync: '', health: '', label: '' },
  page: null,
};

// ---------------------------------------------------------------------------------------------
// Helpers

const esc = (v) => String(v ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const short = (sha) => (sha || '').slice(0, 7);
const HEALTH_ICON = { Healthy: '♥', Progressing: '◔', Degraded: '✖', Suspended: '⏸', Missing: '?', Unknown: '?' };
const SYNC_ICON = { Synced: '✔', OutOfSync: '⟳', Unknown: '?' };
const PHASE_ICON = { Running: '◔', Succeeded: '✔', Failed: '✖', Error: '✖' };

function healthBadge(h, testid) {
  const s = h || 'Unknown';
  return `<span class="badge h-${esc(s)}" ${testid ? `data-testid="${testid}"` : ''} title="health"><span aria-hidden="true">${HEALTH_ICON[s] || '?'}</span>${esc(s)}</span>`;
}
function syncBadge(s0, testid) {
  const s = s0 || 'Unknown';
  return `<span class="badge s-${esc(s)}" ${testid ? `data-testid="${testid}"` : ''} title="sync"><span aria-hidden="true">${SYNC_ICON[s] || '?'}</span>${esc(s)}</span>`;
}
function phaseBadge(p, testid) {
  if (!p) return '<span class="muted">–</span>';
  return `<span class="badge p-${esc(p)}" ${testid ? `data-testid="${testid}"` : ''}><span aria-hidden="true">${PHASE_ICON[p] || '•'}</span>${esc(p)}</span>`;
}

function showError(message) {
  $alert.textContent = message;
  $alert.hidden = !message;
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && state.csrf) headers['X-CSRF-Token'] = state.csrf;
  const r = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401 && path !== '/api/session') {
    state.user = null;
    if (location.pathname !== '/login') state.returnTo = location.pathname;
    navigate('/login');
    throw new ApiError(401, 'not logged in');
  }
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!r.ok) throw new ApiError(r.status, (data && data.error) || `${r.status} ${r.statusText}`);
  return data;
}

// Run an action and show its error, if any, in the alert bar.
async function act(fn) {
  try { showError(''); await fn(); } catch (e) { if (e.status !== 401) showError(e.message); }
}

// ---------------------------------------------------------------------------------------------
// Routing

function navigate(path, replace = false) {
  if (location.pathname !== path) history[replace ? 'replaceState' : 'pushState']({}, '', path);
  route();
}

window.addEventListener('popstate', () => route());
document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-link]');
  if (a && !e.ctrlKey && !e.metaKey && !e.shiftKey && a.origin === location.origin) {
    e.preventDefault();
    navigate(a.pathname + a.search);
  }
});

async function ensureUser() {
  if (state.user) return true;
  try {
    const me = await api('GET', '/api/userinfo');
    state.user = me.username;
    state.csrf = me.csrfToken;
    return true;
  } catch { return false; }
}

function closeAppStream() {
  if (state.appStream) { state.appStream.close(); state.appStream = null; }
}

async function route() {
  closeAppStream();
  showError('');
  const path = location.pathname;
  if (path === '/login') return renderLogin();
  if (!(await ensureUser())) return;
  $topbar.hidden = false;
  document.getElementById('user').textContent = state.user;
  for (const a of $topbar.querySelectorAll('nav a')) {
    a.setAttribute('aria-current', path.startsWith(a.getAttribute('href')) ? 'page' : 'false');
  }
  openListStream();
  let m;
  if (path === '/' || path === '/applications') return renderList();
  if ((m = path.match(/^\/applications\/([a-z0-9.-]+)$/))) return renderApp(m[1]);
  if (path === '/applicationsets') return renderAppSets();
  if ((m = path.match(/^\/applicationsets\/([a-z0-9.-]+)$/))) return renderAppSet(m[1]);
  if (path === '/clusters') return renderClusters();
  $main.innerHTML = '<p class="empty">Page not found.</p>';
}

// ---------------------------------------------------------------------------------------------
// Login

function renderLogin() {
  state.page = 'login';
  $topbar.hidden = true;
  if (state.listStream) { state.listStream.close(); state.listStream = null; }
  $main.innerHTML = `
    <form class="login" id="login-form">
      <h1>Capstan</h1>
      <label for="login-username">Username</label>
      <input id="login-username" name="username" autocomplete="username" data-testid="login-username" required>
      <label for="login-password">Password</label>
      <input id="login-password" name="password" type="password" autocomplete="current-password" data-testid="login-password" required>
      <p class="error" data-testid="login-error" role="alert"></p>
      <button type="submit" class="primary" data-testid="login-submit">Log in</button>
      <div class="sso" hidden></div>
    </form>`;
  const form = document.getElementById('login-form');
  const ssoError = new URLSearchParams(location.search).get('sso_error');
  if (ssoError) form.querySelector('.error').textContent = `Single sign-on failed: ${ssoError}`;
  renderSsoButton(form.querySelector('.sso'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const err = form.querySelector('.error');
    err.textContent = '';
    try {
      const me = await api('POST', '/api/session', { username: form.username.value, password: form.password.value });
      state.user = me.username;
      state.csrf = me.csrfToken;
      state.apps.clear();
      navigate(state.returnTo || '/applications', true);
      state.returnTo = null;
    } catch (ex) {
      err.textContent = ex.message;
    }
  });
}

// "Log in with NAME" when the server has single sign-on configured: a plain link, since the login
// is a chain of top-level navigations through the provider and back to /auth/callback.
async function renderSsoButton(box) {
  let settings;
  try { settings = await api('GET', '/api/settings'); } catch { return; }
  if (!settings || !settings.sso || state.page !== 'login') return;
  const back = encodeURIComponent(state.returnTo || '/applications');
  box.innerHTML = `<p class="muted">or</p>
    <a class="button" data-testid="login-sso" href="${esc(settings.sso.loginPath)}?return_to=${back}">Log in with ${esc(settings.sso.name)}</a>`;
  box.hidden = false;
}

document.getElementById('logout').addEventListener('click', async () => {
  try { await api('DELETE', '/api/session'); } catch { /* logged out anyway */ }
  state.user = null;
  state.csrf = null;
  state.apps.clear();
  navigate('/login');
});

// ---------------------------------------------------------------------------------------------
// Applications list (live)

// Live updates re-render the list at most once per frame, and, when rendering is costly (a long
// list: the table's layout grows with its rows), leave the page twice the last render's time
// before the next one, so that a burst of updates cannot keep the page busy.
let listFrame = 0;
let listTimer = 0;
let listNextAt = 0;
function scheduleListRender() {
  if (state.page !== 'list' || listFrame || listTimer) return;
  const frame = () => {
    listFrame = requestAnimationFrame(() => {
      listFrame = 0;
      const start = performance.now();
      renderRows();
      const tbody = document.getElementById('rows');
      if (tbody) void tbody.offsetHeight; // lay out now (the frame would anyway) to count its cost
      const end = performance.now();
      listNextAt = end + 2 * (end - start);
    });
  };
  const wait = listNextAt - performance.now();
  if (wait > 0) listTimer = setTimeout(() => { listTimer = 0; frame(); }, wait);
  else frame();
}

function openListStream() {
  if (state.listStream) return;
  const es = new EventSource('/api/stream/applications');
  // Every (re)connection starts with the whole list: forget what an earlier one said.
  es.addEventListener('open', () => { state.apps.clear(); });
  es.addEventListener('application', (e) => {
    const s = JSON.parse(e.data);
    state.apps.set(s.name, s);
    scheduleListRender();
    if (state.page === 'app' && state.currentApp === s.name) state.currentSummary = s;
  });
  es.addEventListener('deleted', (e) => {
    state.apps.delete(JSON.parse(e.data).name);
    scheduleListRender();
  });
  state.listStream = es;
}

const uniq = (field) => [...new Set([...state.apps.values()].map((a) => a[field]).filter(Boolean))].sort();

function matches(a) {
  const f = state.filters;
  if (f.search && !a.name.includes(f.search.toLowerCase())) return false;
  for (const [k, field] of [['project', 'project'], ['cluster', 'cluster'], ['namespace', 'destNamespace'], ['sync', 'sync'], ['health', 'health']]) {
    if (f[k] && a[field] !== f[k]) return false;
  }
  if (f.label) {
    const [k, v] = f.label.split('=');
    const have = (a.labels || {})[k.trim()];
    if (have === undefined || (v !== undefined && v.trim() !== '' && have !== v.trim())) return false;
  }
  return true;
}

function select(name, label, values) {
  const cur = state.filters[name];
  return `<label>${label}<select data-filter="${name}"><option value="">all</option>${values.map((v) => `<option ${v === cur ? 'selected' : ''}>${esc(v)}</option>`).join('')}</select></label>`;
}

function renderList() {
  state.page = 'list';
  $main.innerHTML = `
    <h1>Applications <span class="muted" id="count"></span></h1>
    <div class="filters" id="filters"></div>
    <table class="apps" role="table">
      <thead role="rowgroup"><tr role="row">${['Name', 'Project', 'Sync', 'Health', 'Revision', 'Cluster', 'Namespace', 'Operation'].map((h) => `<th role="columnheader">${h}</th>`).join('')}</tr></thead>
      <tbody id="rows" role="rowgroup"><tr role="row"><td colspan="8" class="empty" role="cell">Loading…</td></tr></tbody>
    </table>`;
  renderFilters();
  renderRows();
  // The stream fills the list; a plain GET covers a stream that has not delivered yet.
  api('GET', '/api/applications').then((r) => {
    for (const s of r.items) if (!state.apps.has(s.name)) state.apps.set(s.name, s);
    renderFilters();
    renderRows();
  }).catch(() => {});
}

function renderFilters() {
  const box = document.getElementById('filters');
  if (!box) return;
  box.innerHTML = `
    <label>Search<input type="search" data-filter="search" data-testid="app-search" value="${esc(state.filters.search)}" placeholder="name"></label>
    ${select('project', 'Project', uniq('project'))}
    ${select('cluster', 'Cluster', uniq('cluster'))}
    ${select('namespace', 'Namespace', uniq('destNamespace'))}
    ${select('sync', 'Sync', ['Synced', 'OutOfSync', 'Unknown'])}
    ${select('health', 'Health', ['Healthy', 'Progressing', 'Degraded', 'Suspended', 'Missing', 'Unknown'])}
    <label>Label<input data-filter="label" value="${esc(state.filters.label)}" placeholder="key=value"></label>`;
  box.oninput = (e) => {
    const f = e.target.dataset.filter;
    if (f) { state.filters[f] = e.target.value; renderRows(); }
  };
}

// Rows are kept per Application and reused for as long as its summary is the same object (the
// stream stores a new object for every change), so a live update re-creates only the rows that
// changed, a filter only adds and removes rows, and the rows that stay are not touched.
const rowCache = new Map(); // name -> { summary, el }
const byName = new Intl.Collator().compare; // what String.prototype.localeCompare uses, but faster

function rowHtml(a) {
  return `<tr role="row" data-testid="app-row" data-app="${esc(a.name)}">
      <td role="cell" title="${esc(a.name)}"><a href="/applications/${esc(a.name)}" data-link data-testid="app-link">${esc(a.name)}</a></td>
      <td role="cell">${esc(a.project)}</td>
      <td role="cell">${syncBadge(a.sync, 'app-sync-badge')}</td>
      <td role="cell">${healthBadge(a.health, 'app-health-badge')}</td>
      <td role="cell" class="mono">${esc(short(a.revision))}</td>
      <td role="cell">${esc(a.cluster)}</td>
      <td role="cell">${esc(a.destNamespace)}</td>
      <td role="cell">${phaseBadge(a.operation && a.operation.phase)}</td>
    </tr>`;
}

function renderRows() {
  const tbody = document.getElementById('rows');
  if (!tbody) return;
  const all = [...state.apps.values()].sort((a, b) => byName(a.name, b.name));
  const shown = all.filter(matches);
  const count = document.getElementById('count');
  const counted = `(${shown.length} of ${all.length})`;
  if (count.textContent !== counted) count.textContent = counted;
  for (const name of rowCache.keys()) if (!state.apps.has(name)) rowCache.delete(name);
  if (!shown.length) {
    tbody.innerHTML = `<tr role="row"><td colspan="8" class="empty" role="cell">${all.length ? 'No Application matches the filters.' : 'No Applications yet.'}</td></tr>`;
    return;
  }
  // New and changed rows, parsed together.
  const stale = shown.filter((a) => { const c = rowCache.get(a.name); return !c || c.summary !== a; });
  if (stale.length) {
    const parsed = document.createElement('tbody');
    parsed.innerHTML = stale.map(rowHtml).join('');
    const els = [...parsed.children];
    stale.forEach((a, i) => {
      const old = rowCache.get(a.name);
      // A changed row on the page is replaced where it is.
      if (old && old.el.parentNode === tbody) old.el.replaceWith(els[i]);
      rowCache.set(a.name, { summary: a, el: els[i] });
    });
  }
  // Put the shown rows in order, moving only those out of place, then drop what follows them.
  let next = tbody.firstChild;
  for (const a of shown) {
    const { el } = rowCache.get(a.name);
    if (el === next) next = next.nextSibling;
    else tbody.insertBefore(el, next);
  }
  if (next) {
    const rest = document.createRange();
    rest.setStartBefore(next);
    rest.setEndAfter(tbody.lastChild);
    rest.deleteContents();
  }
}

// ---------------------------------------------------------------------------------------------
// One Application

async function renderApp(name) {
  state.page = 'app';
  state.currentApp = name;
  state.tab = state.tab || 'tree';
  state.selected = null;
  $main.innerHTML = `<p class="empty">Loading ${esc(name)}…</p>`;
  let app;
  const stillHere = () => state.page === 'app' && state.currentApp === name;
  try {
    app = await api('GET', `/api/applications/${name}`);
  } catch (e) {
    if (stillHere()) $main.innerHTML = `<p class="empty">${esc(e.message)}</p>`;
    return;
  }
  if (!stillHere()) return;
  state.app = app;
  let summary = state.apps.get(name);
  if (!summary) {
    try { summary = (await api('GET', `/api/applications?search=${encodeURIComponent(name)}`)).items.find((s) => s.name === name); } catch { /* shown without actions */ }
  }
  if (!stillHere()) return;
  state.currentSummary = summary;
  $main.innerHTML = `
    <div id="app-header"></div>
    <div id="app-conditions" class="conditions"></div>
    <div id="app-operation"></div>
    <div class="tabs" role="tablist">
      ${['tree', 'diff', 'events', 'history'].map((t) => `<button type="button" role="tab" data-tab="${t}" data-testid="tab-${t}" aria-selected="${state.tab === t}">${t[0].toUpperCase() + t.slice(1)}</button>`).join('')}
    </div>
    <div class="tabpanel" id="tabpanel" role="tabpanel"></div>
    <div id="dialog"></div>`;
  renderAppHeader();
  renderTab();
  $main.querySelector('.tabs').onclick = (e) => {
    const t = e.target.closest('[data-tab]');
    if (!t) return;
    state.tab = t.dataset.tab;
    for (const b of $main.querySelectorAll('.tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === state.tab));
    renderTab();
  };
  const es = new EventSource(`/api/stream/applications/${name}`);
  let lastStatus = JSON.stringify(app.status || {});
  es.addEventListener('application', (e) => {
    const fresh = JSON.parse(e.data);
    state.app = fresh;
    renderAppHeader();
    const status = JSON.stringify(fresh.status || {});
    if (status !== lastStatus) {
      lastStatus = status;
      if (state.tab === 'tree') throttledTree();
      if (state.tab === 'history') renderTab();
    }
  });
  es.addEventListener('deleted', () => { showError(`Application ${name} was deleted`); });
  closeAppStream();
  state.appStream = es;
}

let treeTimer = 0;
let treeLast = 0;
function throttledTree() {
  const wait = Math.max(0, 1000 - (Date.now() - treeLast));
  if (treeTimer) return;
  treeTimer = setTimeout(() => { treeTimer = 0; treeLast = Date.now(); if (state.tab === 'tree') loadTree(); }, wait);
}

function canSync() {
  return !!(state.currentSummary && state.currentSummary.permissions && state.currentSummary.permissions.sync);
}

function renderAppHeader() {
  const app = state.app;
  const st = app.status || {};
  const src = app.spec.source || {};
  const dst = app.spec.destination || {};
  const op = st.operationState;
  const running = op && op.phase === 'Running';
  document.getElementById('app-header').innerHTML = `
    <div class="header">
      <h1 data-testid="app-title">${esc(app.metadata.name)}</h1>
      ${syncBadge(st.sync && st.sync.status, 'app-sync-badge')}
      ${healthBadge(st.health && st.health.status, 'app-health-badge')}
      <dl class="facts">
        <dt>Revision</dt><dd class="mono">${esc(short(st.sync && st.sync.revision))} <span class="muted">(${esc(src.targetRevision || 'HEAD')})</span></dd>
        <dt>Source</dt><dd class="mono">${esc(src.repoURL)} ${esc(src.path)}</dd>
        <dt>Destination</dt><dd>${esc(dst.name || dst.server)} / ${esc(dst.namespace)}</dd>
        <dt>Project</dt><dd>${esc(app.spec.project || 'default')}</dd>
      </dl>
      <div class="actions">
        ${canSync() ? `<button type="button" class="primary" id="sync-button" data-testid="sync-button">Sync</button>
        <button type="button" id="refresh-button" data-testid="refresh-button">Refresh</button>
        ${running ? '<button type="button" class="danger" id="terminate-button" data-testid="terminate-button">Terminate</button>' : ''}` : ''}
      </div>
    </div>`;
  const conds = st.conditions || [];
  document.getElementById('app-conditions').innerHTML = conds.map((c) => `<div class="condition"><strong>${esc(c.type)}</strong>: ${esc(c.message)}</div>`).join('');
  document.getElementById('app-operation').innerHTML = op ? renderOperation(op) : '';
  const sync = document.getElementById('sync-button');
  if (sync) sync.onclick = openSyncDialog;
  const refresh = document.getElementById('refresh-button');
  if (refresh) refresh.onclick = () => act(() => api('POST', `/api/applications/${app.metadata.name}/refresh`, { hard: false }));
  const term = document.getElementById('terminate-button');
  if (term) term.onclick = () => act(() => api('DELETE', `/api/applications/${app.metadata.name}/operation`));
}

function renderOperation(op) {
  const groups = new Map();
  for (const r of op.resources || []) {
    const key = `${r.syncPhase || 'Sync'} · wave ${r.syncWave || 0}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  const who = op.operation && op.operation.initiatedBy ? ` by ${esc(op.operation.initiatedBy)}` : '';
  return `<div class="operation">
    <strong>Operation</strong> ${phaseBadge(op.phase, 'operation-phase')} <span class="muted">${esc(op.startedAt)}${who}</span>
    <div>${esc(op.message)}</div>
    ${[...groups.entries()].map(([k, rs]) => `<div><em>${esc(k)}</em><ul>${rs.map((r) => `<li>${esc(r.kind)}/${esc(r.name)}: ${esc(r.status)}${r.message ? ` — ${esc(r.message)}` : ''}</li>`).join('')}</ul></div>`).join('')}
  </div>`;
}

function renderTab() {
  const panel = document.getElementById('tabpanel');
  if (!panel) return;
  if (state.tab === 'tree') { panel.innerHTML = '<div class="treewrap"><div class="svgbox" id="svgbox"><p class="muted">Loading the tree…</p></div><div class="panel" id="resource-panel" data-testid="resource-panel" hidden></div></div>'; loadTree(); }
  if (state.tab === 'diff') loadDiff(panel);
  if (state.tab === 'events') loadEvents(panel);
  if (state.tab === 'history') loadHistory(panel);
}

// ----- tree

async function loadTree() {
  const name = state.currentApp;
  let nodes;
  try { nodes = (await api('GET', `/api/applications/${name}/tree`)).nodes; } catch (e) { showError(e.message); return; }
  const box = document.getElementById('svgbox');
  if (!box || state.currentApp !== name) return;
  box.innerHTML = drawTree(state.app, nodes);
  box.onclick = (e) => {
    const g = e.target.closest('[data-testid="tree-node"]');
    if (g && g.dataset.id !== 'root') openResource(nodes.find((n) => n.id === g.dataset.id));
  };
  box.onkeydown = (e) => { if (e.key === 'Enter') box.onclick(e); };
}

const NODE_W = 230; const NODE_H = 46; const COL_GAP = 60; const ROW_GAP = 12;
const HEALTH_COLOUR = { Healthy: '#1e7b34', Progressing: '#1a5fb4', Degraded: '#b42318', Suspended: '#6b7280', Missing: '#a15c07', Unknown: '#6b7280' };

// Columns by depth, rows by the order of leaves (each parent centred on its children).
function drawTree(app, nodes) {
  const children = new Map();
  const root = { id: 'root', kind: 'Application', name: app.metadata.name, health: (app.status && app.status.health && app.status.health.status) || 'Unknown', sync: (app.status && app.status.sync && app.status.sync.status) || '' };
  const byId = new Map(nodes.map((n) => [n.id, n]));
  for (const n of nodes) {
    const p = n.parentId && byId.has(n.parentId) ? n.parentId : 'root';
    if (!children.has(p)) children.set(p, []);
    children.get(p).push(n);
  }
  for (const list of children.values()) list.sort((a, b) => (a.wave - b.wave) || a.kind.localeCompare(b.kind) || a.name.localeCompare(b.name));
  const pos = new Map();
  let row = 0;
  const place = (n, depth) => {
    const kids = children.get(n.id) || [];
    let y;
    if (!kids.length) { y = row; row += 1; } else {
      const ys = kids.map((k) => place(k, depth + 1));
      y = (ys[0] + ys[ys.length - 1]) / 2;
    }
    pos.set(n.id, { x: depth * (NODE_W + COL_GAP) + 10, y: y * (NODE_H + ROW_GAP) + 10, n });
    return y;
  };
  place(root, 0);
  const depth = Math.max(...[...pos.values()].map((p) => p.x)) + NODE_W + 20;
  const height = Math.max(row, 1) * (NODE_H + ROW_GAP) + 20;
  let edges = '';
  for (const [pid, kids] of children) {
    const p = pos.get(pid);
    for (const k of kids) {
      const c = pos.get(k.id);
      const x1 = p.x + NODE_W; const y1 = p.y + NODE_H / 2; const x2 = c.x; const y2 = c.y + NODE_H / 2; const mx = (x1 + x2) / 2;
      edges += `<path class="edge" d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}"/>`;
    }
  }
  const boxes = [...pos.values()].map(({ x, y, n }) => {
    const colour = HEALTH_COLOUR[n.health] || HEALTH_COLOUR.Unknown;
    const label = n.name.length > 24 ? `${n.name.slice(0, 23)}…` : n.name;
    const sync = n.sync ? ` · ${SYNC_ICON[n.sync] || ''} ${n.sync}` : '';
    return `<g class="node" data-testid="tree-node" data-id="${esc(n.id)}" data-kind="${esc(n.kind)}" data-name="${esc(n.name)}" tabindex="0" role="button" aria-label="${esc(n.kind)} ${esc(n.name)}: ${esc(n.health || 'Unknown')}${esc(sync)}">
      <rect x="${x}" y="${y}" width="${NODE_W}" height="${NODE_H}" rx="5" stroke="${colour}"/>
      <rect x="${x}" y="${y}" width="6" height="${NODE_H}" fill="${colour}" stroke="none"/>
      <text x="${x + 14}" y="${y + 18}"><tspan font-weight="600">${esc(n.kind)}</tspan> ${esc(label)}</text>
      <text x="${x + 14}" y="${y + 36}" fill="${colour}">${HEALTH_ICON[n.health] || '?'} ${esc(n.health || 'Unknown')}${esc(sync)}${n.requiresPruning ? ' · prune' : ''}</text>
    </g>`;
  }).join('');
  return `<svg class="tree" data-testid="tree-svg" width="${depth}" height="${height}" role="img" aria-label="Resource tree">${edges}${boxes}</svg>`;
}

async function openResource(n) {
  if (!n) return;
  const panel = document.getElementById('resource-panel');
  panel.hidden = false;
  panel.innerHTML = `<h2>${esc(n.kind)} ${esc(n.name)}</h2><p class="muted">Loading…</p>`;
  const q = new URLSearchParams({ group: n.group, version: n.version, kind: n.kind, namespace: n.namespace, name: n.name });
  try {
    const obj = await api('GET', `/api/applications/${state.currentApp}/resource?${q}`);
    panel.innerHTML = `<h2>${esc(n.kind)} ${esc(n.name)}</h2>
      <p>${healthBadge(n.health)} ${n.sync ? syncBadge(n.sync) : ''}</p>
      ${n.healthMessage ? `<p>${esc(n.healthMessage)}</p>` : ''}
      <pre class="mono">${esc(JSON.stringify(obj, null, 2))}</pre>`;
  } catch (e) {
    panel.innerHTML = `<h2>${esc(n.kind)} ${esc(n.name)}</h2><p>${esc(e.message)}</p>`;
  }
}

// ----- diff, events, history

async function loadDiff(panel) {
  panel.innerHTML = '<p class="muted">Comparing with Git…</p>';
  try {
    const d = await api('GET', `/api/applications/${state.currentApp}/diff`);
    if (!d.objects.length) { panel.innerHTML = `<p class="empty">No differences at ${esc(short(d.revision))}.</p>`; return; }
    panel.innerHTML = d.objects.map((o) => `
      <div data-testid="diff-object">
        <h2>${esc(o.kind)} ${esc(o.namespace ? `${o.namespace}/` : '')}${esc(o.name)} <span class="badge s-OutOfSync">${esc(o.status)}</span></h2>
        <div class="diff">${o.diff.split('\n').map((l) => `<span class="${l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : l.startsWith('@@') ? 'hunk' : 'ctx'}">${esc(l) || ' '}</span>`).join('')}</div>
      </div>`).join('');
  } catch (e) { panel.innerHTML = `<p class="empty">${esc(e.message)}</p>`; }
}

async function loadEvents(panel) {
  panel.innerHTML = '<p class="muted">Loading events…</p>';
  try {
    const ev = await api('GET', `/api/applications/${state.currentApp}/events`);
    panel.innerHTML = ev.items.length ? `<table><thead><tr><th>Type</th><th>Reason</th><th>Object</th><th>Message</th><th>Count</th><th>Last seen</th></tr></thead><tbody>
      ${ev.items.map((e) => `<tr><td>${e.type === 'Warning' ? '⚠ ' : ''}${esc(e.type)}</td><td>${esc(e.reason)}</td><td>${esc(e.object)}</td><td>${esc(e.message)}</td><td>${esc(e.count)}</td><td>${esc(e.lastTimestamp)}</td></tr>`).join('')}
      </tbody></table>` : '<p class="empty">No events.</p>';
  } catch (e) { panel.innerHTML = `<p class="empty">${esc(e.message)}</p>`; }
}

async function loadHistory(panel) {
  try {
    const h = await api('GET', `/api/applications/${state.currentApp}/history`);
    if (state.tab !== 'history') return;
    panel.innerHTML = h.items.length ? `<table><thead><tr><th>ID</th><th>Deployed at</th><th>Revision</th><th>Path</th><th></th></tr></thead><tbody>
      ${h.items.map((e) => `<tr data-testid="history-row" data-id="${esc(e.id)}"><td>${esc(e.id)}</td><td>${esc(e.deployedAt)}</td><td class="mono">${esc(short(e.revision))}</td><td class="mono">${esc(e.source && e.source.path)}</td>
        <td>${canSync() ? `<button type="button" data-rollback="${esc(e.id)}" data-testid="rollback-button">Rollback</button>` : ''}</td></tr>`).join('')}
      </tbody></table>` : '<p class="empty">No syncs yet.</p>';
    panel.onclick = (e) => {
      const b = e.target.closest('[data-rollback]');
      if (b) openRollbackDialog(Number(b.dataset.rollback), h.items.find((x) => String(x.id) === b.dataset.rollback));
    };
  } catch (e) { panel.innerHTML = `<p class="empty">${esc(e.message)}</p>`; }
}

// ----- dialogs

function dialog(html, onSubmit) {
  const host = document.getElementById('dialog');
  host.innerHTML = `<div class="dialog" role="dialog" aria-modal="true"><div><form id="dialog-form">${html}</form></div></div>`;
  const form = document.getElementById('dialog-form');
  form.querySelector('[data-cancel]').onclick = () => { host.innerHTML = ''; };
  form.onsubmit = async (e) => {
    e.preventDefault();
    await act(async () => { await onSubmit(form); host.innerHTML = ''; });
  };
}

function openSyncDialog() {
  const resources = (state.app.status && state.app.status.resources) || [];
  dialog(`
    <h2>Sync ${esc(state.currentApp)}</h2>
    <div class="row"><label><input type="checkbox" name="prune" data-testid="sync-prune"> Prune (delete tracked objects no longer in Git)</label></div>
    <div class="row"><label><input type="checkbox" name="dryRun" data-testid="sync-dry-run"> Dry run</label></div>
    <div class="row">Only these objects (none checked: all)
      <div class="reslist">${resources.map((r) => {
        const key = `${r.group}/${r.kind}/${r.namespace}/${r.name}`;
        return `<div><label><input type="checkbox" name="resource" value="${esc(key)}"> ${esc(r.kind)}/${esc(r.name)} ${syncBadge(r.status)}</label></div>`;
      }).join('') || '<span class="muted">No objects yet.</span>'}</div></div>
    <div class="buttons"><button type="button" data-cancel>Cancel</button><button type="submit" class="primary" data-testid="sync-submit">Synchronize</button></div>`,
  async (form) => {
    const selected = [...form.querySelectorAll('input[name=resource]:checked')].map((i) => i.value);
    await api('POST', `/api/applications/${state.currentApp}/sync`, { prune: form.prune.checked, dryRun: form.dryRun.checked, resources: selected });
  });
}

function openRollbackDialog(id, entry) {
  dialog(`
    <h2>Roll back ${esc(state.currentApp)}</h2>
    <p>Sync history entry ${esc(id)}: revision <span class="mono">${esc(short(entry && entry.revision))}</span>, path <span class="mono">${esc(entry && entry.source && entry.source.path)}</span>.</p>
    <div class="row"><label><input type="checkbox" name="prune"> Prune objects not in that revision</label></div>
    <div class="buttons"><button type="button" data-cancel>Cancel</button><button type="submit" class="primary" data-testid="rollback-confirm">Roll back</button></div>`,
  async (form) => {
    await api('POST', `/api/applications/${state.currentApp}/rollback`, { id, prune: form.prune.checked });
  });
}

// ---------------------------------------------------------------------------------------------
// ApplicationSets and clusters

async function renderAppSets() {
  state.page = 'appsets';
  $main.innerHTML = '<h1>ApplicationSets</h1><p class="muted">Loading…</p>';
  try {
    const r = await api('GET', '/api/applicationsets');
    $main.innerHTML = `<h1>ApplicationSets</h1>${r.items.length ? `<table><thead><tr><th>Name</th><th>Project</th><th>Generators</th><th>Applications</th><th>Conditions</th><th>Rollout</th></tr></thead><tbody>
      ${r.items.map((s) => `<tr data-testid="appset-row" data-appset="${esc(s.name)}"><td><a href="/applicationsets/${esc(s.name)}" data-link>${esc(s.name)}</a></td><td>${esc(s.project)}</td><td>${esc(s.generators)}</td><td>${esc(s.applications)}</td>
        <td>${(s.conditions || []).map((c) => `<div>${c.status === 'True' ? '✔' : '✖'} ${esc(c.type)}${c.message ? `: ${esc(c.message)}` : ''}</div>`).join('')}</td>
        <td>${s.rollingSync ? `${(s.rollingSync.steps || []).length} steps` : '<span class="muted">all at once</span>'}</td></tr>`).join('')}
      </tbody></table>` : '<p class="empty">No ApplicationSets.</p>'}`;
  } catch (e) { showError(e.message); }
}

async function renderAppSet(name) {
  state.page = 'appset';
  try {
    const s = await api('GET', `/api/applicationsets/${name}`);
    const st = s.status || {};
    const steps = st.applicationStatus || [];
    $main.innerHTML = `<h1>ApplicationSet ${esc(name)}</h1>
      <div class="conditions">${(st.conditions || []).map((c) => `<div class="notice">${c.status === 'True' ? '✔' : '✖'} <strong>${esc(c.type)}</strong> ${esc(c.message || '')}</div>`).join('')}</div>
      <h2>Generated Applications</h2>
      <table><thead><tr><th>Application</th><th>Sync</th><th>Health</th><th>Rollout step</th><th>Rollout status</th><th>Message</th></tr></thead><tbody>
      ${(st.resources || []).map((r) => {
        const step = steps.find((x) => x.application === r.name) || {};
        return `<tr><td><a href="/applications/${esc(r.name)}" data-link>${esc(r.name)}</a></td><td>${syncBadge(r.status)}</td><td>${healthBadge(r.health && r.health.status)}</td><td>${esc(step.step ?? '')}</td><td>${esc(step.status || '')}</td><td>${esc(step.message || '')}</td></tr>`;
      }).join('') || '<tr><td colspan="6" class="empty">None.</td></tr>'}
      </tbody></table>`;
  } catch (e) { $main.innerHTML = `<p class="empty">${esc(e.message)}</p>`; }
}

async function renderClusters() {
  state.page = 'clusters';
  $main.innerHTML = '<h1>Clusters</h1><p class="muted">Loading…</p>';
  try {
    const r = await api('GET', '/api/clusters');
    $main.innerHTML = `<h1>Clusters</h1><table><thead><tr><th>Name</th><th>Server</th><th>State</th><th>Version</th><th>Labels</th><th>Message</th></tr></thead><tbody>
      ${r.items.map((c) => `<tr data-testid="cluster-row" data-cluster="${esc(c.name)}"><td>${esc(c.name)}</td><td class="mono">${esc(c.server)}</td>
        <td><span class="badge ${c.state === 'Successful' ? 'h-Healthy' : c.state === 'Failed' ? 'h-Degraded' : 'h-Unknown'}">${c.state === 'Successful' ? '✔' : c.state === 'Failed' ? '✖' : '?'} ${esc(c.state)}</span></td>
        <td>${esc(c.version)}</td><td>${Object.entries(c.labels || {}).map(([k, v]) => `<span class="badge">${esc(k)}=${esc(v)}</span>`).join(' ')}</td><td>${esc(c.message)}</td></tr>`).join('')}
      </tbody></table>`;
  } catch (e) { showError(e.message); }
}

route();
