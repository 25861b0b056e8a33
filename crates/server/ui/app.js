// @ts-check
// Capstan web UI: a small single-page application over the JSON API (docs/server.md).
//
// Every page is a lit-html template (ui/vendor/lit-html/, vendored from npm, see docs/server.md):
// values are bound, never parsed as HTML, so text from the API cannot become markup. No HTML is
// built from strings anywhere in the UI, and there is no inline script or style (the
// Content-Security-Policy forbids both; crates/server/tests/ui_assets.rs checks the served files). Lists are keyed with repeat(). The state of the page lives
// in `state`; update() renders the current page from it, and lit-html changes only the DOM whose
// values changed. Live updates come over one WebSocket per tab (`live`, below), whatever the page. Types of the API's answers are in
// api.d.ts, generated from the OpenAPI document; `make lint-ui` type-checks this file.

import { html, svg, render, nothing } from './vendor/lit-html/lit-html.js';
import { repeat } from './vendor/lit-html/directives/repeat.js';

// ---------------------------------------------------------------------------------------------
// Types

/**
 * @typedef {import('./api').components['schemas']} Schemas
 * @typedef {import('./api').paths} Paths
 * @typedef {Schemas['AppSummary']} ApplicationSummary
 * @typedef {Schemas['TreeNode']} TreeNode
 * @typedef {Schemas['ClusterItem']} Cluster
 * @typedef {Schemas['UserInfo']} UserInfo
 * @typedef {Schemas['Settings']} Settings
 * @typedef {Paths['/api/applications']['get']['responses'][200]['content']['application/json']} ApplicationList
 * @typedef {Paths['/api/applications/{name}/tree']['get']['responses'][200]['content']['application/json']} Tree
 * @typedef {Paths['/api/applications/{name}/diff']['get']['responses'][200]['content']['application/json']} Diff
 * @typedef {NonNullable<Diff['objects']>[number]} DiffObject
 * @typedef {Paths['/api/clusters']['get']['responses'][200]['content']['application/json']} ClusterList
 * @typedef {Schemas['AppPromotions']} AppPromotions
 * @typedef {Schemas['PromoteTarget']} PromoteTarget
 * @typedef {Schemas['PromotionRecord']} PromotionRecord
 * @typedef {Schemas['PreviewAnswer']} PromotionPreview
 * @typedef {Schemas['PromoteAnswer']} PromoteAnswer
 * @typedef {Schemas['RevisionMetadata']} RevisionMetadata
 * @typedef {Schemas['PolicyItem']} PolicyItem
 * @typedef {Schemas['PolicyVerdict']} PolicyVerdict
 * @typedef {Schemas['ActionItem']} ActionItem
 * @typedef {Schemas['ActionItemList']} ActionItemList
 * @typedef {Schemas['ActionDone']} ActionDone
 */

// What the OpenAPI document leaves open (`type: object`): the Application is the Kubernetes object,
// events, history entries and ApplicationSets are described in docs/server.md. Only the fields the
// UI reads are named.
/**
 * @typedef {{ type?: string, status?: string, message?: string }} Condition
 * @typedef {{ kind?: string, name?: string, status?: string, message?: string, syncPhase?: string, syncWave?: number }} ResourceResult
 * @typedef {{ phase?: string, message?: string, startedAt?: string, finishedAt?: string | null, revision?: string, operation?: { initiatedBy?: string }, resources?: ResourceResult[] }} OperationState
 * @typedef {{ group?: string, kind?: string, namespace?: string, name?: string, status?: string }} ResourceStatus
 * @typedef {{ repoURL?: string, path?: string, targetRevision?: string, chart?: string, ref?: string, name?: string }} Source
 * @typedef {{
 *   metadata: { name: string },
 *   spec: { project?: string, source?: Source, sources?: Source[], destination?: { name?: string, server?: string, namespace?: string }, dependsOn?: { name: string }[],
 *     syncPolicy?: { automated?: { prune?: boolean, selfHeal?: boolean } | null } | null },
 *   status?: {
 *     sync?: { status?: Schemas['SyncCode'], revision?: string, revisions?: string[] },
 *     health?: { status?: Schemas['HealthCode'] },
 *     conditions?: Condition[],
 *     operationState?: OperationState,
 *     resources?: ResourceStatus[],
 *     reconciledAt?: string | null,
 *     history?: HistoryEntry[],
 *   },
 * }} Application
 * @typedef {{ type?: string, reason?: string, object?: string, message?: string, count?: number, lastTimestamp?: string }} EventItem
 * @typedef {{ id: number, deployedAt?: string, revision?: string, source?: Source, sources?: Source[] }} HistoryEntry
 * @typedef {{ name: string, project?: string, generators?: string, applications?: number, conditions?: Condition[], rollingSync?: { steps?: unknown[] } | null }} AppSetSummary
 * @typedef {{ application?: string, step?: number | string, status?: string, message?: string }} AppSetStep
 * @typedef {{ status?: { conditions?: Condition[], applicationStatus?: AppSetStep[], resources?: { name?: string, status?: string, health?: string }[] } }} AppSet
 */

/**
 * Something loaded from the API: still loading (with what the last load gave, if any), loaded, or
 * failed.
 * @template T
 * @typedef {{ loading: boolean, value?: T, error?: string }} Load
 */

/** @typedef {'tree' | 'diff' | 'events' | 'history'} Tab */
/**
 * The live object of a tree node, with the actions its kind has (loaded when the menu opens) and
 * the answer of the last action run on it.
 * @typedef {{ node: TreeNode, object?: unknown, error?: string, actions?: Load<ActionItem[]>, actionMessage?: string }} ResourcePanel
 */
/**
 * The logs panel of a Pod or of the Pods under an object (GET /api/applications/{name}/logs, one
 * JSON object per line). `lines` keeps the last MAX_LOG_LINES; `abort` stops the request in flight
 * (closing the panel, changing the tab or the page); `stick`: scrolled to the end, so new lines
 * scroll it on.
 * @typedef {{ namespace?: string, pod?: string, container?: string, timestamp?: string, content?: string, error?: string }} LogLine
 * @typedef {{ id: number, pod: string, container: string, text: string, error: boolean }} ShownLine
 * @typedef {{
 *   node: TreeNode, container: string, tail: number, previous: boolean, follow: boolean,
 *   lines: ShownLine[], seq: number, dropped: number, pods: Set<string>, containers: Set<string>,
 *   status: 'loading' | 'streaming' | 'done' | 'error', error: string, abort: AbortController | null,
 *   stick: boolean, timer: ReturnType<typeof setTimeout> | 0,
 * }} LogsPanel
 */
/**
 * A promotion being confirmed: its preview (what would change), then the answer of the promotion.
 * @typedef {{ kind: 'promote', target: PromoteTarget, preview: Load<PromotionPreview>, result?: PromoteAnswer, busy?: boolean }} PromoteDialog
 * @typedef {{ kind: 'action', node: TreeNode, action: string, panel: ResourcePanel, error?: string, busy?: boolean }} ActionDialog
 * @typedef {{ kind: 'sync', error?: string, busy?: boolean } | { kind: 'rollback', id: number, entry: HistoryEntry | undefined, error?: string, busy?: boolean } | ActionDialog | PromoteDialog} Dialog
 */
/**
 * The page shown and what it has loaded. Loaders keep the page object they started for and drop
 * their answer when the page has changed since.
 * @typedef {{ page: 'login', error: string, sso: Settings['sso'] }} LoginPage
 * @typedef {{ page: 'list', loaded: boolean, rows: number }} ListPage
 * @typedef {{
 *   page: 'app', name: string, app: Application | null, error: string, summary: ApplicationSummary | undefined,
 *   tree: Load<TreeNode[]>, resource: ResourcePanel | null, logs: LogsPanel | null, diff: Load<Diff>, events: Load<EventItem[]>,
 *   history: Load<HistoryEntry[]>, promotions: Load<AppPromotions>, dialog: Dialog | null,
 *   refreshing?: string, commit?: { revision: string, value?: RevisionMetadata, error?: string },
 * }} AppPage
 * @typedef {{ page: 'appsets', items: Load<AppSetSummary[]> }} AppSetsPage
 * @typedef {{ page: 'appset', name: string, data: Load<AppSet> }} AppSetPage
 * @typedef {{ page: 'clusters', items: Load<Cluster[]> }} ClustersPage
 * @typedef {{ page: 'policies', items: Load<PolicyItem[]> }} PoliciesPage
 * @typedef {{ page: 'notfound' }} NotFoundPage
 * @typedef {LoginPage | ListPage | AppPage | AppSetsPage | AppSetPage | ClustersPage | PoliciesPage | NotFoundPage} Page
 */
/** @typedef {{ search: string, project: string, cluster: string, namespace: string, sync: string, health: string, label: string, sort: string }} Filters */

// ---------------------------------------------------------------------------------------------
// State

/** @param {string} id */
function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} missing from index.html`);
  return el;
}

const $main = byId('main');
const $alert = byId('alert');
const $topbar = byId('topbar');

const state = {
  /** @type {string | null} */ user: null,
  /** @type {string | null} */ csrf: null,
  /** @type {string | null} */ returnTo: null,
  /** @type {Map<string, ApplicationSummary>} name -> summary (the stream stores a new object per change) */
  apps: new Map(),
  /** Counts changes of `apps`: the list's sorted order and filter choices are kept until it moves. */
  appsVersion: 0,
  /** Counts Applications added to or removed from `apps` (a changed one keeps its place by name). */
  appsShape: 0,
  /** @type {Filters} */
  filters: { search: '', project: '', cluster: '', namespace: '', sync: '', health: '', label: '', sort: '' },
  /** @type {Tab} the tab of the Application page, kept from one Application to the next */
  tab: 'tree',
  /** @type {Page | null} */ page: null,
};

/**
 * The tab's title for `page`: what it shows, then Capstan.
 * @param {Page | null} page
 */
function titleOf(page) {
  const what = !page ? '' : page.page === 'login' ? 'Log in'
    : page.page === 'list' ? 'Applications'
    : page.page === 'app' ? page.name
    : page.page === 'appsets' ? 'ApplicationSets'
    : page.page === 'appset' ? `${page.name} (ApplicationSet)`
    : page.page === 'clusters' ? 'Clusters'
    : page.page === 'policies' ? 'Policies' : 'Not found';
  return what ? `${what} · Capstan` : 'Capstan';
}

/** Render the current page; a dialog just opened gets the focus. */
function update() {
  render(state.page ? view(state.page) : nothing, $main);
  if (state.page && state.page.page === 'list') watchMoreRows();
  const title = titleOf(state.page);
  if (document.title !== title) document.title = title;
  const dialog = $main.querySelector('[role="dialog"]');
  if (dialog && !dialog.contains(document.activeElement)) {
    const first = /** @type {HTMLElement | null} */ (dialog.querySelector('input, select, button[type="submit"]'));
    if (first) first.focus();
  }
}

/**
 * Whether `page` is still the one shown.
 * @param {Page} page
 */
const current = (page) => state.page === page;

/**
 * @template T
 * @returns {Load<T>}
 */
const loading = () => ({ loading: true });

// ---------------------------------------------------------------------------------------------
// Helpers

/** @param {string | undefined | null} sha */
/** A revision for display: each commit SHA of a (multi-source, comma-separated) revision to 7 characters. */
const short = (/** @type {string | undefined} */ rev) =>
  (rev || '').split(',').map((r) => (/^[0-9a-f]{40}$/.test(r) ? r.slice(0, 7) : r)).join(',');
/** @type {Record<string, string>} */
const HEALTH_ICON = { Healthy: '♥', Progressing: '◔', Degraded: '✖', Suspended: '⏸', Missing: '?', Unknown: '?' };
/** @type {Record<string, string>} */
const SYNC_ICON = { Synced: '✔', OutOfSync: '⟳', Unknown: '?' };
/** @type {Record<string, string>} */
const PHASE_ICON = { Running: '◔', Succeeded: '✔', Failed: '✖', Error: '✖' };

/**
 * @param {string | undefined} h
 * @param {string} [testid]
 */
function healthBadge(h, testid) {
  const s = h || 'Unknown';
  return html`<span class="badge h-${s}" data-testid=${testid ?? nothing} title="health"><span aria-hidden="true">${HEALTH_ICON[s] || '?'}</span>${s}</span>`;
}
/**
 * @param {string | undefined} s0
 * @param {string} [testid]
 */
function syncBadge(s0, testid) {
  const s = s0 || 'Unknown';
  return html`<span class="badge s-${s}" data-testid=${testid ?? nothing} title="sync"><span aria-hidden="true">${SYNC_ICON[s] || '?'}</span>${s}</span>`;
}
/**
 * @param {string | undefined} p
 * @param {string} [testid]
 */
function phaseBadge(p, testid) {
  if (!p) return html`<span class="muted">–</span>`;
  return html`<span class="badge p-${p}" data-testid=${testid ?? nothing}><span aria-hidden="true">${PHASE_ICON[p] || '•'}</span>${p}</span>`;
}

/**
 * A time from the API (RFC 3339, to the second or the millisecond) as people read it: how long ago,
 * with the exact time, to the second, on hover.
 * @param {string | null | undefined} iso
 */
function when(iso) {
  if (!iso) return nothing;
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const exact = new Date(t).toISOString().replace(/\.\d{3}Z$/, 'Z');
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  const ago = s < 60 ? `${s} s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago` : s < 86400 ? `${Math.floor(s / 3600)} h ago` : `${Math.floor(s / 86400)} d ago`;
  return html`<time datetime=${exact} title=${exact} data-testid="time">${ago}</time>`;
}

/** @param {string} message */
function showError(message) {
  $alert.textContent = message;
  $alert.hidden = !message;
}

class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   */
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** @param {unknown} e */
const messageOf = (e) => (e instanceof Error ? e.message : String(e));

/**
 * A JSON request to the API. The answer's type is the caller's (`@type` on the result), from
 * api.d.ts where the OpenAPI document describes it.
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
async function api(method, path, body) {
  /** @type {Record<string, string>} */
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
  /** @type {any} */
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!r.ok) throw new ApiError(r.status, (data && data.error) || `${r.status} ${r.statusText}`);
  return data;
}

/**
 * Run an action and show its error, if any, in the alert bar.
 * @param {() => Promise<unknown>} fn
 */
async function act(fn) {
  try { showError(''); await fn(); } catch (e) { if (!(e instanceof ApiError && e.status === 401)) showError(messageOf(e)); }
}

/**
 * The named control of a form.
 * @param {HTMLFormElement} form
 * @param {string} name
 */
function field(form, name) {
  return /** @type {HTMLInputElement} */ (form.elements.namedItem(name));
}

// ---------------------------------------------------------------------------------------------
// Routing

/**
 * @param {string} path
 * @param {boolean} [replace]
 */
function navigate(path, replace = false) {
  if (location.pathname !== path) history[replace ? 'replaceState' : 'pushState']({}, '', path);
  route();
}

window.addEventListener('popstate', () => route());
// Esc closes the open dialog, as Cancel does.
document.addEventListener('keydown', (e) => {
  const page = state.page;
  if (e.key === 'Escape' && page && page.page === 'app' && page.dialog) {
    page.dialog = null;
    update();
  }
});
document.addEventListener('click', (e) => {
  const target = e.target instanceof Element ? e.target : null;
  const a = target && target.closest('a[data-link]');
  if (a instanceof HTMLAnchorElement && !e.ctrlKey && !e.metaKey && !e.shiftKey && a.origin === location.origin) {
    e.preventDefault();
    navigate(a.pathname + a.search);
  }
});

// ---------------------------------------------------------------------------------------------
// Live updates: one WebSocket per tab carries every subscription (GET /api/stream, docs/server.md).
// Browsers give an HTTP/1.1 host six connections, shared by all tabs; a WebSocket does not count
// against them, so any number of tabs stay live and their requests are never queued behind streams.
// When the socket drops, the top bar says so and it is opened again (1 s, doubling up to 10 s);
// every (re)connection starts with the current state of each topic.

/** @typedef {(event: string, data: any) => void} TopicHandler */
const live = {
  /** @type {WebSocket | null} */ ws: null,
  /** @type {Map<string, TopicHandler>} topic -> what to do with its frames */
  topics: new Map(),
  /** @type {ReturnType<typeof setTimeout> | 0} */ retryTimer: 0,
  retries: 0,
  sendQueued: false,
};

/** @param {'connecting' | 'live' | 'retrying' | 'off'} s */
function setLiveState(s) {
  const el = byId('live');
  el.dataset.state = s;
  el.hidden = s !== 'retrying';
  el.textContent = s === 'retrying' ? 'Live updates lost — reconnecting…' : '';
}

function liveSend() {
  if (live.sendQueued) return;
  live.sendQueued = true;
  queueMicrotask(() => {
    live.sendQueued = false;
    if (live.ws && live.ws.readyState === WebSocket.OPEN) live.ws.send(JSON.stringify({ topics: [...live.topics.keys()] }));
  });
}

function liveConnect() {
  if (live.ws || live.retryTimer) return;
  const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/stream`);
  live.ws = ws;
  ws.addEventListener('open', () => {
    live.retries = 0;
    setLiveState('live');
    // A new connection starts each topic again with its whole state.
    if (live.topics.has('applications')) { state.apps.clear(); state.appsVersion += 1; state.appsShape += 1; }
    liveSend();
  });
  ws.addEventListener('message', (e) => {
    /** @type {{ topic?: string, event?: string, data?: any }} */
    const f = JSON.parse(e.data);
    const handler = live.topics.get(f.topic || '');
    if (handler) handler(f.event || '', f.data || {});
    else if (f.event === 'error' && f.data && f.data.error) showError(f.data.error);
  });
  ws.addEventListener('close', () => {
    if (live.ws !== ws) return;
    live.ws = null;
    if (!state.user) { setLiveState('off'); return; }
    setLiveState('retrying');
    const wait = Math.min(10000, 1000 * 2 ** live.retries);
    live.retries += 1;
    live.retryTimer = setTimeout(() => { live.retryTimer = 0; liveConnect(); }, wait);
  });
}

/**
 * Subscribe to `topic` (or drop it with `handler` null), opening the socket if need be.
 * @param {string} topic
 * @param {TopicHandler | null} handler
 */
function liveTopic(topic, handler) {
  if (handler) { live.topics.set(topic, handler); liveConnect(); } else live.topics.delete(topic);
  liveSend();
}

/** Close the socket (logged out): no retrying. */
function liveStop() {
  live.topics.clear();
  if (live.retryTimer) { clearTimeout(live.retryTimer); live.retryTimer = 0; }
  const ws = live.ws;
  live.ws = null;
  if (ws) ws.close();
  setLiveState('off');
}

async function ensureUser() {
  if (state.user) return true;
  try {
    /** @type {UserInfo} */
    const me = await api('GET', '/api/userinfo');
    state.user = me.username ?? '';
    state.csrf = me.csrfToken ?? null;
    return true;
  } catch { return false; }
}

function closeAppStream() {
  for (const topic of [...live.topics.keys()]) {
    if (topic.startsWith('application/')) liveTopic(topic, null);
  }
}

/**
 * Show `page`.
 * @template {Page} P
 * @param {P} page
 * @returns {P}
 */
function show(page) {
  state.page = page;
  update();
  return page;
}

async function route() {
  closeAppStream();
  if (state.page && state.page.page === 'app') closeLogs(state.page);
  showError('');
  const path = location.pathname;
  if (path === '/login') return openLogin();
  if (!(await ensureUser())) return;
  $topbar.hidden = false;
  byId('user').textContent = state.user;
  for (const a of $topbar.querySelectorAll('nav a')) {
    a.setAttribute('aria-current', path.startsWith(a.getAttribute('href') || '') ? 'page' : 'false');
  }
  openListStream();
  let m;
  if (path === '/' || path === '/applications') return openList();
  if ((m = path.match(/^\/applications\/([a-z0-9.-]+)$/))) return openApp(m[1]);
  if (path === '/applicationsets') return openAppSets();
  if ((m = path.match(/^\/applicationsets\/([a-z0-9.-]+)$/))) return openAppSet(m[1]);
  if (path === '/clusters') return openClusters();
  if (path === '/policies') return openPolicies();
  show({ page: 'notfound' });
}

/** @param {Page} page */
function view(page) {
  switch (page.page) {
    case 'login': return loginView(page);
    case 'list': return listView(page);
    case 'app': return appView(page);
    case 'appsets': return appSetsView(page);
    case 'appset': return appSetView(page);
    case 'clusters': return clustersView(page);
    case 'policies': return policiesView(page);
    default: return html`<p class="empty">Page not found.</p>`;
  }
}

// ---------------------------------------------------------------------------------------------
// Login

function openLogin() {
  $topbar.hidden = true;
  liveStop();
  const ssoError = new URLSearchParams(location.search).get('sso_error');
  /** @type {LoginPage} */
  const page = { page: 'login', error: ssoError ? `Single sign-on failed: ${ssoError}` : '', sso: null };
  show(page);
  // "Log in with NAME" when the server has single sign-on configured: a plain link, since the login
  // is a chain of top-level navigations through the provider and back to /auth/callback.
  api('GET', '/api/settings').then((/** @type {Settings} */ settings) => {
    if (!current(page) || !settings || !settings.sso) return;
    page.sso = settings.sso;
    update();
  }, () => {});
}

/**
 * @param {LoginPage} page
 * @param {SubmitEvent} e
 */
async function submitLogin(page, e) {
  e.preventDefault();
  const form = /** @type {HTMLFormElement} */ (e.currentTarget);
  page.error = '';
  update();
  try {
    /** @type {UserInfo} */
    const me = await api('POST', '/api/session', { username: field(form, 'username').value, password: field(form, 'password').value });
    state.user = me.username ?? '';
    state.csrf = me.csrfToken ?? null;
    state.apps.clear();
    navigate(state.returnTo || '/applications', true);
    state.returnTo = null;
  } catch (ex) {
    if (!current(page)) return;
    page.error = messageOf(ex);
    update();
  }
}

/** @param {LoginPage} page */
function loginView(page) {
  const back = encodeURIComponent(state.returnTo || '/applications');
  return html`
    <form class="login" id="login-form" @submit=${(/** @type {SubmitEvent} */ e) => submitLogin(page, e)}>
      <h1>Capstan</h1>
      <label for="login-username">Username</label>
      <input id="login-username" name="username" autocomplete="username" data-testid="login-username" required>
      <label for="login-password">Password</label>
      <input id="login-password" name="password" type="password" autocomplete="current-password" data-testid="login-password" required>
      <p class="error" data-testid="login-error" role="alert">${page.error}</p>
      <button type="submit" class="primary" data-testid="login-submit">Log in</button>
      <div class="sso" ?hidden=${!page.sso}>${page.sso ? html`<p class="muted">or</p>
        <a class="button" data-testid="login-sso" href="${page.sso.loginPath ?? ''}?return_to=${back}">Log in with ${page.sso.name}</a>` : nothing}</div>
    </form>`;
}

byId('logout').addEventListener('click', async () => {
  try { await api('DELETE', '/api/session'); } catch { /* logged out anyway */ }
  state.user = null;
  state.csrf = null;
  state.apps.clear();
  state.appsVersion += 1;
  state.appsShape += 1;
  liveStop();
  navigate('/login');
});

// ---------------------------------------------------------------------------------------------
// Applications list (live)

// Live updates re-render the list at most once per frame, and, when rendering is costly (a long
// list: the table's layout grows with its rows), leave the page twice the last render's time
// before the next one, so that a burst of updates cannot keep the page busy.
let listFrame = 0;
/** @type {ReturnType<typeof setTimeout> | 0} */
let listTimer = 0;
let listNextAt = 0;
function scheduleListRender() {
  if (!state.page || state.page.page !== 'list' || listFrame || listTimer) return;
  const frame = () => {
    listFrame = requestAnimationFrame(() => {
      listFrame = 0;
      const start = performance.now();
      update();
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
  if (live.topics.has('applications')) return;
  liveTopic('applications', (event, data) => {
    if (event === 'application') {
      /** @type {ApplicationSummary} */
      const s = data;
      if (!s.name) return;
      if (!state.apps.has(s.name)) state.appsShape += 1;
      state.apps.set(s.name, s);
      state.appsVersion += 1;
      const page = state.page;
      if (page && page.page === 'list') page.loaded = true;
      scheduleListRender();
      if (page && page.page === 'app' && page.name === s.name) page.summary = s;
    } else if (event === 'deleted') {
      if (state.apps.delete(data.name)) { state.appsVersion += 1; state.appsShape += 1; }
      scheduleListRender();
    }
  });
}

/** @typedef {(labels: Record<string, string>) => boolean} LabelTest */

/**
 * A label selector as the server reads it (`team=a,!legacy`, `tier in (web,api)`, `k!=v`): one test
 * per expression, every one must hold.
 * @param {string} text
 * @returns {LabelTest[]}
 */
function parseSelector(text) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '(') depth += 1;
    else if (c === ')') depth -= 1;
    else if (c === ',' && depth === 0) { parts.push(text.slice(start, i)); start = i + 1; }
  }
  parts.push(text.slice(start));
  /** @type {(l: Record<string, string>, k: string) => boolean} */
  const has = (l, k) => Object.prototype.hasOwnProperty.call(l, k);
  /** @type {LabelTest[]} */
  const tests = [];
  for (const raw of parts) {
    const e = raw.trim();
    let m;
    if (!e) continue;
    if (e.startsWith('!')) { const k = e.slice(1).trim(); tests.push((l) => !has(l, k)); }
    else if ((m = e.match(/^([^!=\s]+)\s*!=\s*(.*)$/))) { const [, k, v] = m; tests.push((l) => !has(l, k) || l[k] !== v.trim()); }
    else if ((m = e.match(/^([^!=\s]+)\s*==?\s*(.*)$/))) { const [, k, v] = m; tests.push((l) => has(l, k) && l[k] === v.trim()); }
    else if ((m = e.match(/^(\S+)\s+(in|notin)\s*\((.*)\)$/))) {
      const [, k, op, values] = m;
      const set = new Set(values.split(',').map((v) => v.trim()));
      tests.push(op === 'in' ? (l) => has(l, k) && set.has(l[k]) : (l) => !has(l, k) || !set.has(l[k]));
    } else tests.push((l) => has(l, e));
  }
  return tests;
}

/** @type {{ text: string, tests: LabelTest[] }} the label filter, parsed once per text */
let labelFilter = { text: '', tests: [] };

/** @param {ApplicationSummary} a */
function matches(a) {
  const f = state.filters;
  if (f.search && !(a.name || '').includes(f.search.toLowerCase())) return false;
  /** @type {[keyof Filters, keyof ApplicationSummary][]} */
  const fields = [['project', 'project'], ['cluster', 'cluster'], ['namespace', 'destNamespace'], ['sync', 'sync'], ['health', 'health']];
  for (const [k, field] of fields) {
    if (f[k] && a[field] !== f[k]) return false;
  }
  if (f.label) {
    if (labelFilter.text !== f.label) labelFilter = { text: f.label, tests: parseSelector(f.label) };
    const labels = a.labels || {};
    for (const test of labelFilter.tests) if (!test(labels)) return false;
  }
  return true;
}

/** @param {Event} e */
function onFilter(e) {
  const el = /** @type {HTMLInputElement | HTMLSelectElement} */ (e.target);
  const f = /** @type {keyof Filters | undefined} */ (el.dataset.filter);
  if (f) setFilter(f, el.value);
}

/**
 * Set one filter of the list, keeping them all in the URL, so a reload, a bookmark or a link shows
 * the same list.
 * @param {keyof Filters} f
 * @param {string} value
 */
function setFilter(f, value) {
  state.filters[f] = value;
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(state.filters)) if (v) query.set(k, v);
  const search = query.toString();
  history.replaceState({}, '', `${location.pathname}${search ? `?${search}` : ''}`);
  update();
}

/**
 * How many of `apps` have each health and each sync status; a click filters on it.
 * @param {ApplicationSummary[]} apps
 */
function countsView(apps) {
  /** @type {Map<string, number>} */
  const health = new Map();
  /** @type {Map<string, number>} */
  const sync = new Map();
  for (const a of apps) {
    health.set(a.health || 'Unknown', (health.get(a.health || 'Unknown') || 0) + 1);
    sync.set(a.sync || 'Unknown', (sync.get(a.sync || 'Unknown') || 0) + 1);
  }
  return html`<div class="counts" data-testid="status-counts">
    ${[...health].map(([h, n]) => html`<button type="button" class="count" data-count=${`health-${h}`} title="show only ${h}" @click=${() => setFilter('health', h)}>${healthBadge(h)} ${n}</button>`)}
    ${[...sync].map(([s, n]) => html`<button type="button" class="count" data-count=${`sync-${s}`} title="show only ${s}" @click=${() => setFilter('sync', s)}>${syncBadge(s)} ${n}</button>`)}
  </div>`;
}

/** The list's filters from the URL's query (those it does not name are cleared). */
function filtersFromUrl() {
  const query = new URLSearchParams(location.search);
  for (const k of /** @type {(keyof Filters)[]} */ (Object.keys(state.filters))) state.filters[k] = query.get(k) || '';
}

/**
 * @param {keyof Filters} name
 * @param {string} label
 * @param {string[]} values
 */
function select(name, label, values) {
  const cur = state.filters[name];
  return html`<label>${label}<select data-filter=${name} @input=${onFilter}><option value="" ?selected=${cur === ''}>all</option>${repeat(values, (v) => v, (v) => html`<option ?selected=${v === cur}>${v}</option>`)}</select></label>`;
}

/** Rows of the list in the DOM at first, and how many more each time its end scrolls into view. */
const ROWS_STEP = 100;
/** Applications of the first page asked of the server, shown while the live stream delivers the rest. */
const FIRST_PAGE = 50;

function openList() {
  filtersFromUrl();
  /** @type {ListPage} */
  const page = { page: 'list', loaded: state.apps.size > 0, rows: ROWS_STEP };
  show(page);
  if (state.apps.size > 0) return;
  // The stream fills the list (every Application, then each change); the first page of the list,
  // filtered by the server as the URL asks, shows the first rows before the stream has delivered.
  const query = new URLSearchParams({ limit: String(FIRST_PAGE) });
  const f = state.filters;
  for (const [k, v] of [['search', f.search], ['project', f.project], ['cluster', f.cluster], ['namespace', f.namespace], ['sync', f.sync], ['health', f.health], ['label', f.label]]) {
    if (v) query.set(k, v);
  }
  api('GET', `/api/applications?${query}`).then((/** @type {ApplicationList} */ r) => {
    for (const s of r.items || []) {
      if (s.name && !state.apps.has(s.name)) { state.apps.set(s.name, s); state.appsVersion += 1; state.appsShape += 1; }
    }
  }).catch(() => {}).finally(() => {
    if (!current(page)) return;
    page.loaded = true;
    update();
  });
}

/** @type {IntersectionObserver | null} */
let moreRowsObserver = null;
/** Show more rows when the end of the list comes near the screen (after each render of the list). */
function watchMoreRows() {
  if (!moreRowsObserver) {
    moreRowsObserver = new IntersectionObserver((entries) => {
      const page = state.page;
      if (!page || page.page !== 'list' || !entries.some((e) => e.isIntersecting)) return;
      page.rows += ROWS_STEP;
      update();
    }, { rootMargin: '800px' });
  }
  moreRowsObserver.disconnect();
  const more = document.getElementById('more-rows');
  if (more) moreRowsObserver.observe(more);
}

const byName = new Intl.Collator().compare; // what String.prototype.localeCompare uses, but faster
/**
 * Names in the server's order (byte order; names are lower-case ASCII), so that the first page it
 * sends is the top of the list.
 * @param {string} a
 * @param {string} b
 */
const byCode = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
const COLUMNS = ['Name', 'Project', 'Sync', 'Health', 'Revision', 'Cluster', 'Namespace', 'Operation', 'Message'];
/**
 * What each column sorts on (its key is the column's name in lower case). The list is sorted by
 * name unless `sort` (in the URL, like the filters) names a column, `-column` for descending.
 * @type {Record<string, (a: ApplicationSummary) => string>}
 */
const SORT_KEYS = {
  name: (a) => a.name || '',
  project: (a) => a.project || '',
  sync: (a) => a.sync || '',
  health: (a) => a.health || '',
  revision: (a) => a.revision || '',
  cluster: (a) => a.cluster || '',
  namespace: (a) => a.destNamespace || '',
  operation: (a) => { const op = /** @type {OperationState | null | undefined} */ (a.operation); return (op && op.phase) || ''; },
  message: (a) => statusMessage(a),
};

/** @param {string} column a key of SORT_KEYS: sort on it, or the other way round if it is the sort already */
function sortOn(column) {
  const cur = state.filters.sort || 'name';
  const next = cur === column ? `-${column}` : column;
  setFilter('sort', next === 'name' ? '' : next);
}

/** @param {string} header */
function columnHeader(header) {
  const column = header.toLowerCase();
  const cur = state.filters.sort || 'name';
  const dir = cur === column ? 'ascending' : cur === `-${column}` ? 'descending' : 'none';
  return html`<th role="columnheader" aria-sort=${dir}><button type="button" class="sort" data-testid="sort-${column}" title="sort by ${column}" @click=${() => sortOn(column)}>${header}${dir === 'ascending' ? ' ▲' : dir === 'descending' ? ' ▼' : ''}</button></th>`;
}

/**
 * What is wrong with an Application, in one line, as `capstan app list` shows it: its first
 * condition, else the message of its last operation if that failed, else why it is not Healthy.
 * @param {ApplicationSummary} a
 */
function statusMessage(a) {
  const op = /** @type {OperationState | null | undefined} */ (a.operation);
  const condition = (a.conditions || []).find((c) => c.message);
  let message = '';
  if (condition) message = `${condition.type}: ${condition.message}`;
  else if (op && (op.phase === 'Failed' || op.phase === 'Error') && op.message) message = op.message;
  else if (a.health !== 'Healthy' && a.healthMessage) message = a.healthMessage;
  return message.split('\n')[0].trim();
}

/** @param {ApplicationSummary} a */
function rowView(a) {
  const name = a.name || '';
  const op = /** @type {OperationState | null | undefined} */ (a.operation);
  // data-label: the column's name, shown in each cell when rows are cards (narrow screens).
  return html`<tr role="row" data-testid="app-row" data-app=${name}>
      <td role="cell" data-label="Name" title=${name}><a href="/applications/${name}" data-link data-testid="app-link">${name}</a></td>
      <td role="cell" data-label="Project" title=${a.project}>${a.project}</td>
      <td role="cell" data-label="Sync">${syncBadge(a.sync, 'app-sync-badge')}</td>
      <td role="cell" data-label="Health">${healthBadge(a.health, 'app-health-badge')}</td>
      <td role="cell" data-label="Revision" class="mono" title=${a.revision || ''}>${short(a.revision)}</td>
      <td role="cell" data-label="Cluster" title=${a.cluster} data-testid="app-cluster">${a.cluster}</td>
      <td role="cell" data-label="Namespace" title=${a.destNamespace}>${a.destNamespace}</td>
      <td role="cell" data-label="Operation">${phaseBadge(op ? op.phase : undefined)}</td>
      <td role="cell" data-label="Message" class="message" title=${statusMessage(a)} data-testid="app-message">${statusMessage(a)}</td>
    </tr>`;
}

/**
 * Every Application in the list's order and the values its filters offer, computed again only when
 * the Applications or the order changed (typing in a filter reuses them).
 * @type {{ version: number, shape: number, sort: string, all: ApplicationSummary[], values: Record<'project' | 'cluster' | 'destNamespace', string[]> } | null}
 */
let listCache = null;

function sortedApps() {
  const sort = state.filters.sort || 'name';
  if (listCache && listCache.version === state.appsVersion && listCache.sort === sort) return listCache;
  const desc = sort.startsWith('-') ? -1 : 1;
  const column = sort.replace(/^-/, '');
  const key = SORT_KEYS[column] || SORT_KEYS.name;
  const byNameOnly = column === 'name' || !SORT_KEYS[column];
  /** @type {ApplicationSummary[]} */
  let all;
  if (byNameOnly && listCache && listCache.shape === state.appsShape && listCache.sort === sort) {
    // The same Applications, some changed: in name order each keeps its place (a burst of changes
    // costs no sort).
    all = listCache.all.map((a) => state.apps.get(a.name || '') || a);
  } else {
    all = [...state.apps.values()];
    if (byNameOnly) all.sort((a, b) => desc * byCode(a.name || '', b.name || ''));
    else all.sort((a, b) => desc * (byName(key(a), key(b)) || byCode(a.name || '', b.name || '')));
  }
  /** @param {'project' | 'cluster' | 'destNamespace'} f */
  const uniq = (f) => [...new Set(all.map((a) => a[f] || '').filter(Boolean))].sort();
  listCache = { version: state.appsVersion, shape: state.appsShape, sort, all, values: { project: uniq('project'), cluster: uniq('cluster'), destNamespace: uniq('destNamespace') } };
  return listCache;
}

/** @param {ListPage} page */
function listView(page) {
  const { all, values } = sortedApps();
  const shown = all.filter(matches);
  const f = state.filters;
  const filtered = Object.entries(f).some(([k, v]) => k !== 'sort' && v);
  let empty = '';
  if (!shown.length) empty = all.length || (page.loaded && filtered) ? 'No Application matches the filters.' : page.loaded ? 'No Applications yet.' : 'Loading…';
  // Only the first rows are in the DOM (more as the list is scrolled): the filters and counts cover
  // every Application, the table what can be seen.
  const rows = shown.length > page.rows ? shown.slice(0, page.rows) : shown;
  const rest = shown.length - rows.length;
  return html`
    <h1>Applications <span class="muted" id="count">(${shown.length} of ${all.length})</span></h1>
    ${countsView(shown)}
    <div class="filters" id="filters">
      <label>Search<input type="search" data-filter="search" data-testid="app-search" .value=${f.search} placeholder="name" @input=${onFilter}></label>
      ${select('project', 'Project', values.project)}
      ${select('cluster', 'Cluster', values.cluster)}
      ${select('namespace', 'Namespace', values.destNamespace)}
      ${select('sync', 'Sync', ['Synced', 'OutOfSync', 'Unknown'])}
      ${select('health', 'Health', ['Healthy', 'Progressing', 'Degraded', 'Suspended', 'Missing', 'Unknown'])}
      <label>Label<input data-filter="label" .value=${f.label} placeholder="key=value" @input=${onFilter}></label>
    </div>
    <table class="apps" role="table">
      <thead role="rowgroup"><tr role="row">${COLUMNS.map(columnHeader)}</tr></thead>
      <tbody id="rows" role="rowgroup">${empty
        ? html`<tr role="row"><td colspan="9" class="empty" role="cell">${empty}</td></tr>`
        : repeat(rows, (a) => a.name, rowView)}${rest > 0
        ? html`<tr role="row" id="more-rows" data-testid="more-rows"><td colspan="9" class="empty" role="cell"><button type="button" @click=${() => { page.rows += ROWS_STEP; update(); }}>Show ${Math.min(ROWS_STEP, rest)} more (${rest} not shown)</button></td></tr>`
        : nothing}</tbody>
    </table>`;
}

// ---------------------------------------------------------------------------------------------
// One Application

/** @param {string} name */
async function openApp(name) {
  /** @type {AppPage} */
  const page = {
    page: 'app', name, app: null, error: '', summary: undefined, tree: loading(), resource: null, logs: null,
    diff: loading(), events: loading(), history: loading(), promotions: loading(), dialog: null,
  };
  show(page);
  try {
    page.app = await api('GET', `/api/applications/${name}`);
  } catch (e) {
    if (current(page)) { page.error = messageOf(e); update(); }
    return;
  }
  if (!current(page)) return;
  let summary = state.apps.get(name);
  if (!summary) {
    try {
      /** @type {ApplicationList} */
      const r = await api('GET', `/api/applications?search=${encodeURIComponent(name)}`);
      summary = (r.items || []).find((s) => s.name === name);
    } catch { /* shown without actions */ }
  }
  if (!current(page)) return;
  page.summary = summary;
  update();
  loadTab(page);
  if (state.tab !== 'tree') loadTree(page);
  loadCommit(page);
  loadPromotions(page);
  let lastStatus = JSON.stringify((page.app && page.app.status) || {});
  closeAppStream();
  liveTopic(`application/${name}`, (event, data) => {
    if (!current(page)) return;
    if (event === 'deleted') { showError(`Application ${name} was deleted`); return; }
    if (event === 'error') { showError(data.error || `Application ${name} is no longer readable`); return; }
    if (event !== 'application') return;
    /** @type {Application} */
    const fresh = data;
    page.app = fresh;
    update();
    loadCommit(page);
    const status = JSON.stringify(fresh.status || {});
    if (status !== lastStatus) {
      lastStatus = status;
      if (state.tab === 'tree') throttledTree(page);
      if (state.tab === 'history') { loadHistory(page); loadPromotions(page); }
    }
  });
}

/** @type {ReturnType<typeof setTimeout> | 0} */
let treeTimer = 0;
let treeLast = 0;
/** @param {AppPage} page */
function throttledTree(page) {
  const wait = Math.max(0, 1000 - (Date.now() - treeLast));
  if (treeTimer) return;
  treeTimer = setTimeout(() => { treeTimer = 0; treeLast = Date.now(); if (current(page) && state.tab === 'tree') loadTree(page); }, wait);
}

/** @param {AppPage} page */
function canSync(page) {
  return !!(page.summary && page.summary.permissions && page.summary.permissions.sync);
}

/**
 * @param {AppPage} page
 * @param {Tab} tab
 */
function selectTab(page, tab) {
  state.tab = tab;
  if (tab === 'tree') page.resource = null;
  if (tab !== 'tree') closeLogs(page);
  update();
  loadTab(page);
}

/** @param {AppPage} page */
function loadTab(page) {
  if (state.tab === 'tree') loadTree(page);
  if (state.tab === 'diff') loadDiff(page);
  if (state.tab === 'events') loadEvents(page);
  if (state.tab === 'history') { loadHistory(page); loadPromotions(page); }
}

/** @param {AppPage} page */
function appView(page) {
  const app = page.app;
  if (!app) return html`<p class="empty">${page.error || `Loading ${page.name}…`}</p>`;
  /** @type {Tab[]} */
  const tabs = ['tree', 'diff', 'events', 'history'];
  const st = app.status || {};
  const op = st.operationState;
  return html`
    <div id="app-header">${appHeader(page, app)}</div>
    <div id="app-conditions" class="conditions">${repeat(guardrailsFirst(st.conditions || []), (c) => c.type, conditionView)}</div>
    <div id="app-operation">${op ? operationView(op) : nothing}</div>
    <div class="tabs" role="tablist">
      ${tabs.map((t) => html`<button type="button" role="tab" data-tab=${t} data-testid="tab-${t}" aria-selected=${String(state.tab === t)} @click=${() => selectTab(page, t)}>${t[0].toUpperCase() + t.slice(1)}</button>`)}
    </div>
    <div class="tabpanel" id="tabpanel" role="tabpanel">${tabView(page, app)}</div>
    <div id="dialog">${page.dialog ? dialogView(page, page.dialog) : nothing}</div>`;
}

/**
 * How a guardrail's condition stands out on the Application page: a policy's denial and the
 * deletion budget stopped the last sync (nothing of it was applied), a policy's warning let it go
 * on. Other conditions keep the plain condition style.
 * @type {Record<string, { kind: 'denied' | 'warning', mark: string }>}
 */
const GUARDRAIL_CONDITIONS = {
  PolicyDenied: { kind: 'denied', mark: '✖' },
  DeletionBudgetExceeded: { kind: 'denied', mark: '✖' },
  PolicyWarning: { kind: 'warning', mark: '⚠' },
};

/**
 * The conditions with the guardrails' first (denials, then warnings), the others in their order.
 * @param {Condition[]} conditions
 */
function guardrailsFirst(conditions) {
  /** @param {Condition} c */
  const rank = (c) => { const g = GUARDRAIL_CONDITIONS[c.type || '']; return !g ? 2 : g.kind === 'denied' ? 0 : 1; };
  return conditions.map((c, i) => ({ c, i })).sort((a, b) => rank(a.c) - rank(b.c) || a.i - b.i).map((x) => x.c);
}

/** @param {Condition} c */
function conditionView(c) {
  const g = GUARDRAIL_CONDITIONS[c.type || ''];
  if (!g) return html`<div class="condition" data-testid="app-condition" data-type=${c.type || ''}><strong>${c.type}</strong>: ${c.message}</div>`;
  return html`<div class="condition ${g.kind}" role=${g.kind === 'denied' ? 'alert' : 'status'} data-testid="app-condition" data-type=${c.type || ''}>
    <strong><span aria-hidden="true">${g.mark}</span> ${c.type}</strong>: ${c.message}</div>`;
}

/**
 * Ask for a refresh of `page`'s Application, compared last at `reconciledAt`: its button says
 * Refreshing… until the comparison after it arrives on the live stream (at most a minute).
 * @param {AppPage} page
 * @param {string} reconciledAt
 */
function refresh(page, reconciledAt) {
  page.refreshing = reconciledAt;
  update();
  setTimeout(() => { if (page.refreshing === reconciledAt) { page.refreshing = undefined; update(); } }, 60000);
  act(() => api('POST', `/api/applications/${page.name}/refresh`, { hard: false })).then(() => {
    if (page.refreshing === reconciledAt && $alert.textContent) { page.refreshing = undefined; update(); }
  });
}

/**
 * @param {AppPage} page
 * @param {Application} app
 */
function appHeader(page, app) {
  const st = app.status || {};
  const src = app.spec.source || {};
  const sources = app.spec.sources || [];
  const dst = app.spec.destination || {};
  const op = st.operationState;
  const running = op && op.phase === 'Running';
  const name = app.metadata.name;
  // Refreshing until the controller has compared again (reconciledAt moves on).
  const refreshing = page.refreshing !== undefined && page.refreshing === (st.reconciledAt || '');
  const dependsOn = app.spec.dependsOn || [];
  // A sync window holding the automated sync (which window, when the next sync may run), or one
  // that does not parse.
  const held = (st.conditions || []).find((c) => c.type === 'SyncWindowBlocked' || c.type === 'SyncWindowError');
  return html`
    <div class="header">
      <h1 data-testid="app-title">${name}</h1>
      ${syncBadge(st.sync && st.sync.status, 'app-sync-badge')}
      ${healthBadge(st.health && st.health.status, 'app-health-badge')}
      <dl class="facts">
        ${sources.length ? sourcesView(sources, (st.sync && st.sync.revisions) || []) : html`
        <dt>Revision</dt><dd class="mono" data-testid="app-revision">${short(st.sync && st.sync.revision)} <span class="muted">(${src.targetRevision || 'HEAD'})</span></dd>
        <dt>Source</dt><dd class="mono">${src.repoURL} ${src.chart ? `chart ${src.chart}` : src.path}</dd>`}
        <dt>Destination</dt><dd>${dst.name || dst.server} / ${dst.namespace}</dd>
        <dt>Project</dt><dd>${app.spec.project || 'default'}</dd>
        <dt>Sync policy</dt><dd data-testid="app-sync-policy">${syncPolicyText(app)}</dd>
        <dt>Last sync</dt><dd data-testid="app-last-sync">${lastSyncView(st)}</dd>
        ${sources.length ? nothing : html`<dt>Commit</dt><dd data-testid="app-commit">${commitView(page)}</dd>`}
        <dt>Images</dt><dd class="mono" data-testid="app-images">${imagesView(page)}</dd>
        ${dependsOn.length ? html`<dt>Depends on</dt><dd data-testid="app-depends-on">${dependsOn.map((d) => d.name).join(', ')}</dd>` : nothing}
        ${held ? html`<dt>Sync window</dt><dd data-testid="app-sync-window">${held.message}</dd>` : nothing}
      </dl>
      ${revisionNote(app)}
      <div class="actions">
        ${canSync(page) ? html`<button type="button" class="primary" id="sync-button" data-testid="sync-button" @click=${() => { page.dialog = { kind: 'sync' }; update(); }}>Sync</button>
        <button type="button" id="refresh-button" data-testid="refresh-button" ?disabled=${refreshing} aria-busy=${refreshing ? 'true' : 'false'} @click=${() => refresh(page, st.reconciledAt || '')}>${refreshing ? 'Refreshing…' : 'Refresh'}</button>
        ${running ? html`<button type="button" class="danger" id="terminate-button" data-testid="terminate-button" @click=${() => act(() => api('DELETE', `/api/applications/${name}/operation`))}>Terminate</button>` : nothing}` : nothing}
        ${promoteButtons(page)}
      </div>
    </div>`;
}

/**
 * The Application's sync policy as Argo CD's header says it: Manual, or Automated with prune and
 * self-heal when on.
 * @param {Application} app
 */
function syncPolicyText(app) {
  const auto = app.spec.syncPolicy && app.spec.syncPolicy.automated;
  if (!auto) return 'Manual';
  const on = [auto.prune ? 'prune' : '', auto.selfHeal ? 'self-heal' : ''].filter(Boolean);
  return on.length ? `Automated (${on.join(', ')})` : 'Automated';
}

/**
 * The last sync: how it ended, when, and the revision it synced.
 * @param {NonNullable<Application['status']>} st
 */
function lastSyncView(st) {
  const op = st.operationState;
  if (!op) return html`<span class="muted">never</span>`;
  return html`${phaseBadge(op.phase)} ${when(op.finishedAt || op.startedAt)}${op.revision ? html` to <span class="mono">${short(op.revision)}</span>` : nothing}`;
}

/**
 * The commit the header's revision names: its message's first line and author (the whole message
 * on hover), loaded by loadCommit.
 * @param {AppPage} page
 */
function commitView(page) {
  const c = page.commit;
  if (!c || !c.value) return html`<span class="muted">${c && c.error ? c.error : '–'}</span>`;
  const subject = (c.value.message || '').split('\n')[0];
  return html`<span title=${c.value.message}>${subject}</span> <span class="muted">— ${c.value.author} ${when(c.value.date)}</span>`;
}

/**
 * Load the metadata of the revision the header shows, once per revision.
 * @param {AppPage} page
 */
async function loadCommit(page) {
  const st = (page.app && page.app.status) || {};
  const revision = (st.sync && st.sync.revision) || '';
  if (!/^[0-9a-f]{40}$/.test(revision) || (page.commit && page.commit.revision === revision)) return;
  page.commit = { revision };
  try {
    /** @type {RevisionMetadata} */
    const value = await api('GET', `/api/applications/${page.name}/revisions/${revision}/metadata`);
    if (page.commit && page.commit.revision === revision) page.commit.value = value;
  } catch (e) {
    if (page.commit && page.commit.revision === revision) page.commit.error = messageOf(e);
  }
  if (current(page)) update();
}

/**
 * The images its live Pods run (from the tree).
 * @param {AppPage} page
 */
function imagesView(page) {
  const nodes = page.tree.value;
  if (!nodes) return html`<span class="muted">–</span>`;
  const images = [...new Set(nodes.flatMap((n) => n.images || []))].sort();
  return images.length ? images.join(', ') : html`<span class="muted">no running Pods</span>`;
}

/**
 * Why the header's revision (what Git's target resolves to, compared now) is not the last history
 * entry's (what the last successful sync deployed), when they differ.
 * @param {Application} app
 */
function revisionNote(app) {
  const st = app.status || {};
  const history = st.history || [];
  const last = history[history.length - 1];
  const now = (st.sync && st.sync.revision) || '';
  if (!last || !last.revision || !now || last.revision === now) return nothing;
  const op = st.operationState;
  const auto = app.spec.syncPolicy && app.spec.syncPolicy.automated;
  const why = op && op.phase === 'Running' ? 'a sync is running'
    : op && op.revision === now && op.phase !== 'Succeeded' ? `the sync to it ${(op.phase || '').toLowerCase()}`
    : auto ? 'an automated sync will deploy it' : 'the sync policy is manual: Sync deploys it';
  return html`<p class="muted revision-note" data-testid="app-revision-note">Git's ${short(now)} is compared here; the last sync (history #${last.id}) deployed ${short(last.revision)} — ${why}.</p>`;
}

/**
 * What a history entry deployed: its source's path or chart, or each of its sources'.
 * @param {HistoryEntry} e
 */
function sourceLabel(e) {
  const one = (/** @type {Source} */ s) => s.chart || s.path || (s.ref ? `ref ${s.ref}` : '.');
  return e.sources && e.sources.length ? e.sources.map(one).join(', ') : e.source ? one(e.source) : '';
}

/**
 * The sources of a multi-source Application, each with its revision.
 * @param {Source[]} sources
 * @param {string[]} revisions
 */
function sourcesView(sources, revisions) {
  return html`
        <dt>Sources</dt><dd><ol class="sources" data-testid="app-sources">${sources.map((s, i) => html`
          <li class="mono">${s.repoURL} ${s.chart ? `chart ${s.chart}` : s.path}${s.ref ? html` <span class="muted">ref ${s.ref}</span>` : nothing}
            <span class="muted">(${s.targetRevision || (s.chart ? 'latest' : 'HEAD')})</span> ${short(revisions[i])}</li>`)}</ol></dd>`;
}

/** @param {OperationState} op */
function operationView(op) {
  /** @type {Map<string, ResourceResult[]>} */
  const groups = new Map();
  for (const r of op.resources || []) {
    const key = `${r.syncPhase || 'Sync'} · wave ${r.syncWave || 0}`;
    const group = groups.get(key);
    if (group) group.push(r); else groups.set(key, [r]);
  }
  const who = op.operation && op.operation.initiatedBy ? ` by ${op.operation.initiatedBy}` : '';
  return html`<div class="operation">
    <strong>Operation</strong> ${phaseBadge(op.phase, 'operation-phase')} <span class="muted">${when(op.startedAt)}${who}</span>
    <div>${op.message}</div>
    ${repeat(groups.entries(), ([k]) => k, ([k, rs]) => html`<div><em>${k}</em><ul>${rs.map((r) => html`<li>${r.kind}/${r.name}: ${r.status}${r.message ? ` — ${r.message}` : ''}</li>`)}</ul></div>`)}
  </div>`;
}

/**
 * @param {AppPage} page
 * @param {Application} app
 */
function tabView(page, app) {
  switch (state.tab) {
    case 'tree': return html`<div class="treewrap">
        <div class="svgbox" id="svgbox">${page.tree.value ? treeView(page, app, page.tree.value) : html`<p class="muted">Loading the tree…</p>`}</div>
        <div class="panel" id="resource-panel" data-testid="resource-panel" ?hidden=${!page.resource}>${page.resource ? resourceView(page, page.resource) : nothing}</div>
      </div>
      ${page.logs ? logsView(page, page.logs) : nothing}`;
    case 'diff': return diffView(page.diff);
    case 'events': return eventsView(page.events);
    case 'history': return html`${historyView(page, page.history)}${promotionsView(page.promotions)}`;
    default: return nothing;
  }
}

// ----- tree

/** @param {AppPage} page */
async function loadTree(page) {
  page.tree = { ...page.tree, loading: true };
  try {
    /** @type {Tree} */
    const t = await api('GET', `/api/applications/${page.name}/tree`);
    page.tree = { loading: false, value: t.nodes || [] };
  } catch (e) {
    if (current(page)) showError(messageOf(e));
    return;
  }
  if (current(page)) update();
}

const NODE_W = 230; const NODE_H = 46; const COL_GAP = 60; const ROW_GAP = 12;
/** @type {Record<string, string>} */
const HEALTH_COLOUR = { Healthy: '#1e7b34', Progressing: '#1a5fb4', Degraded: '#b42318', Suspended: '#6b7280', Missing: '#a15c07', Unknown: '#6b7280' };

/**
 * Columns by depth, rows by the order of leaves (each parent centred on its children).
 * @param {AppPage} page
 * @param {Application} app
 * @param {TreeNode[]} nodes
 */
function treeView(page, app, nodes) {
  /** @type {Map<string, TreeNode[]>} */
  const children = new Map();
  const st = app.status || {};
  /** @type {TreeNode} */
  const root = {
    id: 'root', group: 'capstan.dev', version: 'v1alpha1', kind: 'Application', namespace: '',
    name: app.metadata.name, health: (st.health && st.health.status) || 'Unknown', healthMessage: '',
    sync: (st.sync && st.sync.status) || '', requiresPruning: false, wave: 0,
  };
  const ids = new Set(nodes.map((n) => n.id));
  for (const n of nodes) {
    const p = n.parentId && ids.has(n.parentId) ? n.parentId : 'root';
    const list = children.get(p);
    if (list) list.push(n); else children.set(p, [n]);
  }
  for (const list of children.values()) {
    list.sort((a, b) => ((a.wave || 0) - (b.wave || 0)) || (a.kind || '').localeCompare(b.kind || '') || (a.name || '').localeCompare(b.name || ''));
  }
  /** @type {Map<string, { x: number, y: number, n: TreeNode }>} */
  const pos = new Map();
  let row = 0;
  /**
   * @param {TreeNode} n
   * @param {number} depth
   * @returns {number}
   */
  const place = (n, depth) => {
    const kids = children.get(n.id || '') || [];
    let y;
    if (!kids.length) { y = row; row += 1; } else {
      const ys = kids.map((k) => place(k, depth + 1));
      y = (ys[0] + ys[ys.length - 1]) / 2;
    }
    pos.set(n.id || '', { x: depth * (NODE_W + COL_GAP) + 10, y: y * (NODE_H + ROW_GAP) + 10, n });
    return y;
  };
  place(root, 0);
  const width = Math.max(...[...pos.values()].map((p) => p.x)) + NODE_W + 20;
  const height = Math.max(row, 1) * (NODE_H + ROW_GAP) + 20;
  /** @type {{ id: string, d: string }[]} */
  const edges = [];
  for (const [pid, kids] of children) {
    const p = pos.get(pid);
    if (!p) continue;
    for (const k of kids) {
      const c = pos.get(k.id || '');
      if (!c) continue;
      const x1 = p.x + NODE_W; const y1 = p.y + NODE_H / 2; const x2 = c.x; const y2 = c.y + NODE_H / 2; const mx = (x1 + x2) / 2;
      edges.push({ id: `${pid}>${k.id}`, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` });
    }
  }
  /** @param {TreeNode} n */
  const open = (n) => { if (n.id !== 'root') openResource(page, n); };
  /** @param {{ x: number, y: number, n: TreeNode }} p */
  const box = ({ x, y, n }) => {
    const colour = HEALTH_COLOUR[n.health || ''] || HEALTH_COLOUR.Unknown;
    const name = n.name || '';
    const label = name.length > 24 ? `${name.slice(0, 23)}…` : name;
    const sync = n.sync ? ` · ${SYNC_ICON[n.sync] || ''} ${n.sync}` : '';
    return svg`<g class="node" data-testid="tree-node" data-id=${n.id || ''} data-kind=${n.kind || ''} data-name=${name} tabindex="0" role="button"
        aria-label="${n.kind} ${name}: ${n.health || 'Unknown'}${sync}"
        @click=${() => open(n)} @keydown=${(/** @type {KeyboardEvent} */ e) => { if (e.key === 'Enter') open(n); }}>
      <rect x=${x} y=${y} width=${NODE_W} height=${NODE_H} rx="5" stroke=${colour}/>
      <rect x=${x} y=${y} width="6" height=${NODE_H} fill=${colour} stroke="none"/>
      <text x=${x + 14} y=${y + 18}><tspan font-weight="600">${n.kind}</tspan> ${label}</text>
      <text x=${x + 14} y=${y + 36} fill=${colour}>${HEALTH_ICON[n.health || ''] || '?'} ${n.health || 'Unknown'}${sync}${n.requiresPruning ? ' · prune' : ''}</text>
    </g>`;
  };
  return html`<svg class="tree" data-testid="tree-svg" width=${width} height=${height} role="img" aria-label="Resource tree">${repeat(edges, (e) => e.id, (e) => svg`<path class="edge" d=${e.d}/>`)}${repeat(pos.values(), (p) => p.n.id, box)}</svg>`;
}

/**
 * @param {AppPage} page
 * @param {TreeNode} n
 */
async function openResource(page, n) {
  /** @type {ResourcePanel} */
  const panel = { node: n };
  page.resource = panel;
  update();
  const q = new URLSearchParams({ group: n.group || '', version: n.version || '', kind: n.kind || '', namespace: n.namespace || '', name: n.name || '' });
  try {
    panel.object = await api('GET', `/api/applications/${page.name}/resource?${q}`);
  } catch (e) {
    panel.error = messageOf(e);
  }
  if (current(page) && page.resource === panel) update();
}

/**
 * @param {AppPage} page
 * @param {ResourcePanel} panel
 */
function resourceView(page, panel) {
  const n = panel.node;
  const title = html`<h2>${n.kind} ${n.name}</h2>${resourceControls(page, panel)}`;
  if (panel.error) return html`${title}<p>${panel.error}</p>`;
  if (panel.object === undefined) return html`${title}<p class="muted">Loading…</p>`;
  return html`${title}
    <p>${healthBadge(n.health)} ${n.sync ? syncBadge(n.sync) : nothing}</p>
    ${n.healthMessage ? html`<p>${n.healthMessage}</p>` : nothing}
    <pre class="mono">${JSON.stringify(panel.object, null, 2)}</pre>`;
}

// ----- logs and actions of a tree node

/** Kinds whose Pods' logs the panel reads: a Pod's own, or the Pods under the object. */
const LOG_KINDS = new Set(['Pod', 'Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job']);
/** Kinds the server has actions for (restart; suspend and resume; retry): only these get the menu. */
const ACTION_KINDS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'CronJob', 'Job']);
/** How many log lines the page keeps (the oldest go first). */
const MAX_LOG_LINES = 5000;

/** @param {AppPage} page */
function canAct(page) {
  return !!(page.summary && page.summary.permissions && page.summary.permissions.action);
}

/**
 * The Logs button and the Actions menu of the resource panel.
 * @param {AppPage} page
 * @param {ResourcePanel} panel
 */
function resourceControls(page, panel) {
  const n = panel.node;
  const logs = LOG_KINDS.has(n.kind || '');
  const actions = ACTION_KINDS.has(n.kind || '') && canAct(page);
  if (!logs && !actions) return nothing;
  const menu = panel.actions;
  return html`<div class="res-controls">
      ${logs ? html`<button type="button" data-testid="logs-button" @click=${() => openLogs(page, n)}>Logs</button>` : nothing}
      ${actions ? html`<button type="button" data-testid="actions-button" aria-haspopup="true" aria-expanded=${menu ? 'true' : 'false'} @click=${() => toggleActions(page, panel)}>Actions ▾</button>` : nothing}
    </div>
    ${menu ? html`<div class="action-menu" data-testid="action-menu">${menu.error ? html`<p class="dialog-error" role="alert">${menu.error}</p>`
      : !menu.value ? html`<p class="muted">Loading actions…</p>`
      : !menu.value.length ? html`<p class="muted">No actions for ${n.kind}.</p>`
      : menu.value.map((a) => html`<div class="action-item"><button type="button" data-testid="action-item" data-action=${a.name} ?disabled=${!!a.disabled} title=${a.disabled || nothing}
          @click=${() => { page.dialog = { kind: 'action', node: n, action: a.name, panel }; update(); }}>${a.name}</button>${a.disabled ? html` <span class="muted" data-testid="action-disabled">${a.disabled}</span>` : nothing}</div>`)}</div>` : nothing}
    ${panel.actionMessage ? html`<p class="notice" role="status" data-testid="action-message">${panel.actionMessage}</p>` : nothing}`;
}

/**
 * Open or close the Actions menu of `panel`, loading what the server offers for its object.
 * @param {AppPage} page
 * @param {ResourcePanel} panel
 */
async function toggleActions(page, panel) {
  if (panel.actions) { panel.actions = undefined; update(); return; }
  /** @type {Load<ActionItem[]>} */
  const menu = loading();
  panel.actions = menu;
  update();
  const n = panel.node;
  const q = new URLSearchParams({ group: n.group || '', kind: n.kind || '', namespace: n.namespace || '', name: n.name || '' });
  try {
    /** @type {ActionItemList} */
    const r = await api('GET', `/api/applications/${page.name}/actions?${q}`);
    menu.value = r.items || [];
  } catch (e) {
    menu.error = messageOf(e);
  }
  menu.loading = false;
  if (current(page) && panel.actions === menu) update();
}

/**
 * Run the confirmed action: its answer is shown in the resource panel, and the events (where the
 * server records it) are read again.
 * @param {AppPage} page
 * @param {ActionDialog} d
 */
async function runAction(page, d) {
  const n = d.node;
  /** @type {ActionDone} */
  const done = await api('POST', `/api/applications/${page.name}/actions`, { group: n.group || '', kind: n.kind || '', namespace: n.namespace || '', name: n.name || '', action: d.action });
  d.panel.actionMessage = done.message;
  d.panel.actions = undefined;
  if (page.events.value || state.tab === 'events') loadEvents(page);
}

/**
 * Open the logs panel for node `n` (replacing one already open).
 * @param {AppPage} page
 * @param {TreeNode} n
 */
function openLogs(page, n) {
  closeLogs(page);
  page.logs = {
    node: n, container: '', tail: 100, previous: false, follow: false, lines: [], seq: 0, dropped: 0,
    pods: new Set(), containers: new Set(), status: 'loading', error: '', abort: null, stick: true, timer: 0,
  };
  startLogs(page);
}

/**
 * Close the logs panel, stopping its request.
 * @param {AppPage} page
 */
function closeLogs(page) {
  const p = page.logs;
  if (!p) return;
  if (p.abort) p.abort.abort();
  if (p.timer) clearTimeout(p.timer);
  page.logs = null;
}

/**
 * (Re)start reading the logs with the panel's choices; a followed answer stays open and its lines
 * are appended as they arrive.
 * @param {AppPage} page
 */
async function startLogs(page) {
  const p = page.logs;
  if (!p) return;
  if (p.abort) p.abort.abort();
  const ctrl = new AbortController();
  Object.assign(p, { abort: ctrl, lines: [], dropped: 0, error: '', status: 'loading', stick: true });
  update();
  const n = p.node;
  const q = new URLSearchParams({ namespace: n.namespace || '', tailLines: String(p.tail) });
  if (n.kind === 'Pod') q.set('pod', n.name || '');
  else { q.set('group', n.group || ''); q.set('kind', n.kind || ''); q.set('resourceName', n.name || ''); }
  if (p.container) q.set('container', p.container);
  if (p.previous) q.set('previous', 'true');
  if (p.follow) q.set('follow', 'true');
  const mine = () => current(page) && page.logs === p && p.abort === ctrl;
  try {
    const r = await fetch(`/api/applications/${page.name}/logs?${q}`, { credentials: 'same-origin', signal: ctrl.signal });
    if (r.status === 401) { ctrl.abort(); await api('GET', '/api/userinfo'); return; }
    if (!r.ok || !r.body) {
      const text = await r.text();
      let message = text;
      try { message = JSON.parse(text).error || text; } catch { /* not JSON: the text itself */ }
      throw new ApiError(r.status, message || `${r.status} ${r.statusText}`);
    }
    if (!mine()) { ctrl.abort(); return; }
    p.status = 'streaming';
    update();
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (!mine()) { ctrl.abort(); return; }
      if (done) break;
      rest += decoder.decode(value, { stream: true });
      const parts = rest.split('\n');
      rest = parts.pop() || '';
      for (const l of parts) addLogLine(p, l);
      scheduleLogs(page, p);
    }
    addLogLine(p, rest + decoder.decode());
    p.status = 'done';
    p.abort = null;
    scheduleLogs(page, p);
  } catch (e) {
    if (ctrl.signal.aborted || !mine()) return;
    p.status = 'error';
    p.error = e instanceof ApiError ? logsRefusal(e) : messageOf(e);
    p.abort = null;
    update();
  }
}

/**
 * What a refused logs request means, with the server's message.
 * @param {ApiError} e
 */
function logsRefusal(e) {
  const what = e.status === 403 ? 'Not allowed' : e.status === 422 ? 'Too many Pods' : e.status === 400 ? 'Cannot read these logs'
    : e.status === 404 ? 'Nothing to read' : `Error ${e.status}`;
  return `${what} (${e.status}): ${e.message}`;
}

/**
 * One NDJSON line of the answer into the panel, keeping the last MAX_LOG_LINES.
 * @param {LogsPanel} p
 * @param {string} raw
 */
function addLogLine(p, raw) {
  if (!raw.trim()) return;
  /** @type {LogLine} */
  let l;
  try { l = JSON.parse(raw); } catch { l = { content: raw }; }
  const pod = l.pod || '';
  const container = l.container || '';
  if (pod) p.pods.add(pod);
  if (container) p.containers.add(container);
  p.seq += 1;
  const error = l.error !== undefined;
  p.lines.push({ id: p.seq, pod, container, text: error ? `✖ ${l.error}` : l.content || '', error });
  if (p.lines.length > MAX_LOG_LINES + 500) {
    const drop = p.lines.length - MAX_LOG_LINES;
    p.lines.splice(0, drop);
    p.dropped += drop;
  }
}

/**
 * Render the panel's new lines at most ten times a second, scrolled to the end unless the person
 * scrolled up.
 * @param {AppPage} page
 * @param {LogsPanel} p
 */
function scheduleLogs(page, p) {
  if (p.timer) return;
  p.timer = setTimeout(() => {
    p.timer = 0;
    if (!current(page) || page.logs !== p) return;
    if (p.lines.length > MAX_LOG_LINES) {
      const drop = p.lines.length - MAX_LOG_LINES;
      p.lines.splice(0, drop);
      p.dropped += drop;
    }
    update();
    const box = $main.querySelector('[data-testid="logs-lines"]');
    if (box && p.stick) box.scrollTop = box.scrollHeight;
  }, 100);
}

/**
 * @param {AppPage} page
 * @param {LogsPanel} p
 */
function logsView(page, p) {
  const n = p.node;
  // Lines of several Pods name their Pod and container; of one Pod's containers, the container.
  const many = n.kind !== 'Pod' || p.pods.size > 1;
  const byContainer = !p.container && p.containers.size > 1;
  /** @param {ShownLine} l */
  const prefix = (l) => (many ? `${l.pod}/${l.container} ` : byContainer ? `${l.container} ` : '');
  const containers = [...p.containers].sort();
  if (p.container && !p.containers.has(p.container)) containers.push(p.container);
  /** @param {() => void} change */
  const restart = (change) => { change(); startLogs(page); };
  const status = p.status === 'loading' ? 'Loading…'
    : p.status === 'streaming' ? (p.follow ? 'Following: new lines appear as they are written' : 'Reading…')
    : p.status === 'done' ? `${p.lines.length} line${p.lines.length === 1 ? '' : 's'}` : '';
  return html`<section class="logs" data-testid="logs-panel" aria-label="Logs of ${n.kind} ${n.name}">
    <div class="logs-head">
      <h2>Logs · ${n.kind} ${n.name}</h2>
      <button type="button" data-testid="logs-close" @click=${() => { closeLogs(page); update(); }}>Close</button>
    </div>
    <div class="logs-controls">
      <label>Container
        <select data-testid="logs-container" @change=${(/** @type {Event} */ e) => restart(() => { p.container = /** @type {HTMLSelectElement} */ (e.currentTarget).value; })}>
          <option value="" .selected=${!p.container}>all</option>
          ${containers.map((c) => html`<option value=${c} .selected=${p.container === c}>${c}</option>`)}
        </select></label>
      <label>Tail lines
        <input type="number" min="1" max="10000" step="1" data-testid="logs-tail" .value=${String(p.tail)}
          @change=${(/** @type {Event} */ e) => restart(() => { const v = Math.round(Number(/** @type {HTMLInputElement} */ (e.currentTarget).value)); p.tail = Number.isFinite(v) ? Math.min(10000, Math.max(1, v)) : 100; })}></label>
      <label class="check"><input type="checkbox" data-testid="logs-previous" .checked=${p.previous}
          @change=${(/** @type {Event} */ e) => restart(() => { p.previous = /** @type {HTMLInputElement} */ (e.currentTarget).checked; })}> Previous container</label>
      <label class="check"><input type="checkbox" role="switch" data-testid="logs-follow" .checked=${p.follow}
          @change=${(/** @type {Event} */ e) => restart(() => { p.follow = /** @type {HTMLInputElement} */ (e.currentTarget).checked; })}> Follow</label>
      <button type="button" data-testid="logs-reload" @click=${() => startLogs(page)}>Reload</button>
    </div>
    <p class="muted logs-status" role="status" data-testid="logs-status" data-state=${p.status}>${status}${p.dropped ? ` (the ${p.dropped} oldest not kept)` : ''}</p>
    ${p.error ? html`<p class="dialog-error" role="alert" data-testid="logs-error">${p.error}</p>` : nothing}
    <div class="loglines mono" data-testid="logs-lines" tabindex="0"
      @scroll=${(/** @type {Event} */ e) => { const el = /** @type {HTMLElement} */ (e.currentTarget); p.stick = el.scrollTop + el.clientHeight >= el.scrollHeight - 8; }}>${repeat(p.lines, (l) => l.id, (l) => html`<div class=${l.error ? 'logline err' : 'logline'} data-testid="log-line" data-pod=${l.pod} data-container=${l.container}>${prefix(l) ? html`<span class="prefix">${prefix(l)}</span>` : nothing}${l.text}</div>`)}${p.status === 'done' && !p.lines.length ? html`<p class="muted">No lines.</p>` : nothing}</div>
  </section>`;
}

// ----- diff, events, history

/**
 * Load into `page[key]`, keeping what an earlier load gave while this one runs.
 * @template {'diff' | 'events' | 'history'} K
 * @param {AppPage} page
 * @param {K} key
 * @param {() => Promise<NonNullable<AppPage[K]['value']>>} get
 */
async function loadInto(page, key, get) {
  const before = /** @type {Load<unknown>} */ (page[key]);
  /** @type {Load<unknown>} */
  let next = { loading: true, value: before.value };
  page[key] = /** @type {AppPage[K]} */ (next);
  if (!before.value) update();
  try {
    next = { loading: false, value: await get() };
  } catch (e) {
    next = { loading: false, error: messageOf(e) };
  }
  page[key] = /** @type {AppPage[K]} */ (next);
  if (current(page) && state.tab === key) update();
}

/** @param {AppPage} page */
function loadDiff(page) {
  page.diff = loading();
  return loadInto(page, 'diff', () => api('GET', `/api/applications/${page.name}/diff`));
}

/** @param {AppPage} page */
function loadEvents(page) {
  page.events = loading();
  return loadInto(page, 'events', async () => (await api('GET', `/api/applications/${page.name}/events`)).items || []);
}

/** @param {AppPage} page */
function loadHistory(page) {
  return loadInto(page, 'history', async () => (await api('GET', `/api/applications/${page.name}/history`)).items || []);
}

/** @param {string} l */
const lineClass = (l) => (l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : l.startsWith('@@') ? 'hunk' : 'ctx');

/** @param {Load<Diff>} d */
function diffView(d) {
  if (d.error) return html`<p class="empty">${d.error}</p>`;
  if (!d.value) return html`<p class="muted">Comparing with Git…</p>`;
  const objects = d.value.objects || [];
  if (!objects.length) return html`<p class="empty">No differences at ${short(d.value.revision)}.</p>`;
  return repeat(objects, (o) => `${o.group}/${o.kind}/${o.namespace}/${o.name}`, (o) => html`
      <div data-testid="diff-object">
        <h2>${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name} <span class="badge s-OutOfSync">${o.status}</span></h2>
        <div class="diff">${(o.diff || '').split('\n').map((l) => html`<span class=${lineClass(l)}>${l || ' '}</span>`)}</div>
      </div>`);
}

/** @param {Load<EventItem[]>} ev */
function eventsView(ev) {
  if (ev.error) return html`<p class="empty">${ev.error}</p>`;
  if (!ev.value) return html`<p class="muted">Loading events…</p>`;
  if (!ev.value.length) return html`<p class="empty">No events.</p>`;
  return html`<table><thead><tr><th>Type</th><th>Reason</th><th>Object</th><th>Message</th><th>Count</th><th>Last seen</th></tr></thead><tbody>
      ${ev.value.map((e) => html`<tr><td>${e.type === 'Warning' ? '⚠ ' : ''}${e.type}</td><td>${e.reason}</td><td>${e.object}</td><td>${e.message}</td><td>${e.count}</td><td>${when(e.lastTimestamp)}</td></tr>`)}
    </tbody></table>`;
}

/**
 * @param {AppPage} page
 * @param {Load<HistoryEntry[]>} h
 */
function historyView(page, h) {
  if (h.error) return html`<p class="empty">${h.error}</p>`;
  if (!h.value) return nothing;
  if (!h.value.length) return html`<p class="empty">No syncs yet.</p>`;
  return html`<table><thead><tr><th>ID</th><th>Deployed at</th><th>Revision</th><th>Path</th><th></th></tr></thead><tbody>
      ${repeat(h.value, (e) => e.id, (e, i) => html`<tr data-testid="history-row" data-id=${e.id}><td>${e.id}</td><td>${when(e.deployedAt)}</td><td class="mono">${short(e.revision)}</td><td class="mono">${sourceLabel(e)}</td>
        <td>${i === 0 ? html`<span class="muted" data-testid="history-current">current</span>` : canSync(page) ? html`<button type="button" data-testid="rollback-button" @click=${() => { page.dialog = { kind: 'rollback', id: e.id, entry: e }; update(); }}>Rollback</button>` : nothing}</td></tr>`)}
    </tbody></table>`;
}

// ----- dialogs

/**
 * @param {AppPage} page
 * @param {Dialog} d
 */
function dialogView(page, d) {
  const close = () => { page.dialog = null; update(); };
  // A refused request (409, 422…) is shown in the dialog, where the person is looking, not in the
  // alert bar behind the dialog's overlay; the dialog stays open.
  /** @param {(form: HTMLFormElement) => Promise<unknown>} run */
  const submit = (run) => async (/** @type {SubmitEvent} */ e) => {
    e.preventDefault();
    const form = /** @type {HTMLFormElement} */ (e.currentTarget);
    if (d.kind === 'promote' || d.busy) return;
    // Busy until the server answers: the button says so and a second click sends nothing.
    d.error = '';
    d.busy = true;
    update();
    try {
      await run(form);
      if (page.dialog === d) close();
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return;
      if (page.dialog === d) d.error = messageOf(err); else showError(messageOf(err));
    } finally {
      d.busy = false;
      if (page.dialog === d) update();
    }
  };
  const dialogError = () => (d.kind !== 'promote' && d.error ? html`<p class="dialog-error" role="alert" data-testid="dialog-error">${d.error}</p>` : nothing);
  const busy = d.kind !== 'promote' && Boolean(d.busy);
  const buttons = (/** @type {string} */ testid, /** @type {string} */ label) => html`<div class="buttons"><button type="button" data-cancel @click=${close}>Cancel</button><button type="submit" class="primary" data-testid=${testid} ?disabled=${busy} aria-busy=${busy ? 'true' : 'false'}>${busy ? 'Working…' : label}</button></div>`;
  const name = page.name;
  let body;
  if (d.kind === 'sync') {
    const resources = (page.app && page.app.status && page.app.status.resources) || [];
    // A sync held by the project's deletion budget waits for a person to confirm the deletions.
    const overBudget = ((page.app && page.app.status && page.app.status.conditions) || []).find((c) => c.type === 'DeletionBudgetExceeded');
    body = html`<form id="dialog-form" @submit=${submit(async (form) => {
      const selected = [...form.querySelectorAll('input[name=resource]:checked')].map((i) => /** @type {HTMLInputElement} */ (i).value);
      const allowDeletions = Boolean(overBudget) && field(form, 'allowDeletions').checked;
      await api('POST', `/api/applications/${name}/sync`, { prune: field(form, 'prune').checked || allowDeletions, dryRun: field(form, 'dryRun').checked, resources: selected, allowDeletions });
    })}>
      <h2>Sync ${name}</h2>
      <div class="row"><label><input type="checkbox" name="prune" data-testid="sync-prune"> Prune (delete tracked objects no longer in Git)</label></div>
      ${overBudget ? html`<div class="row"><label><input type="checkbox" name="allowDeletions" data-testid="sync-allow-deletions"> Allow the deletions above the deletion budget (prunes)</label><p class="muted">${overBudget.message}</p></div>` : nothing}
      <div class="row"><label><input type="checkbox" name="dryRun" data-testid="sync-dry-run"> Dry run</label></div>
      <div class="row">Only these objects (none checked: all)
        <div class="reslist">${resources.length ? repeat(resources, (r) => `${r.group}/${r.kind}/${r.namespace}/${r.name}`, (r) => html`<div><label><input type="checkbox" name="resource" value="${r.group}/${r.kind}/${r.namespace}/${r.name}"> ${r.kind}/${r.name} ${syncBadge(r.status)}</label></div>`)
          : html`<span class="muted">No objects yet.</span>`}</div></div>
      ${dialogError()}
      ${buttons('sync-submit', 'Synchronize')}
    </form>`;
  } else if (d.kind === 'promote') {
    return promoteDialogView(page, d, close);
  } else if (d.kind === 'action') {
    const n = d.node;
    body = html`<form id="dialog-form" @submit=${submit(() => runAction(page, d))}>
      <h2>Run ${d.action}</h2>
      <p>Run <strong>${d.action}</strong> on ${n.kind} <span class="mono">${n.namespace ? `${n.namespace}/` : ''}${n.name}</span>?</p>
      ${d.action === 'retry' ? html`<p class="muted" data-testid="action-note">The controller deletes the Job with its Pods and creates it again from Git.</p>` : nothing}
      ${dialogError()}
      ${buttons('action-confirm', d.action[0].toUpperCase() + d.action.slice(1))}
    </form>`;
  } else {
    const entry = d.entry;
    body = html`<form id="dialog-form" @submit=${submit((form) => {
      const revert = field(form, 'revert').checked;
      const body = revert
        ? { id: d.id, revert: true, reason: field(form, 'reason').value }
        : { id: d.id, prune: field(form, 'prune').checked };
      return api('POST', `/api/applications/${name}/rollback`, body);
    })}>
      <h2>Roll back ${name}</h2>
      <p>Sync history entry ${d.id}: revision <span class="mono">${short(entry && entry.revision)}</span>, path <span class="mono">${entry && entry.source && entry.source.path}</span>.</p>
      <div class="row"><label><input type="checkbox" name="revert" data-testid="rollback-revert"> Revert in Git: one commit undoing the later commits of the path (allowed with automated sync, which then follows it)</label></div>
      <div class="row"><label>Reason (with a revert: the commit message) <input type="text" name="reason" maxlength="1000" data-testid="rollback-reason"></label></div>
      <div class="row"><label><input type="checkbox" name="prune"> Prune objects not in that revision (without a revert)</label></div>
      ${dialogError()}
      ${buttons('rollback-confirm', 'Roll back')}
    </form>`;
  }
  return html`<div class="dialog" role="dialog" aria-modal="true"><div>${body}</div></div>`;
}

// ----- promotions

/** @param {AppPage} page */
async function loadPromotions(page) {
  /** @type {Load<AppPromotions>} */
  let next;
  try {
    next = { loading: false, value: await api('GET', `/api/applications/${page.name}/promotions`) };
  } catch (e) {
    next = { loading: false, value: page.promotions.value, error: messageOf(e) };
  }
  page.promotions = next;
  if (current(page)) update();
}

/**
 * A "Promote to ENV" button for each promotion the server says the caller may make from this
 * Application (none without the `promote` role on the target's project).
 * @param {AppPage} page
 */
function promoteButtons(page) {
  const targets = (page.promotions.value && page.promotions.value.promoteTargets) || [];
  const pipelines = new Set(targets.map((t) => t.pipeline));
  return repeat(targets, (t) => `${t.pipeline}/${t.service}/${t.to}`, (t) => html`<button type="button" data-testid="promote-button"
      data-to=${t.to} data-pipeline=${t.pipeline} @click=${() => openPromote(page, t)}>Promote to ${t.to}${pipelines.size > 1 ? ` (${t.pipeline})` : ''}</button>`);
}

/**
 * Open the confirmation of a promotion and load its preview.
 * @param {AppPage} page
 * @param {PromoteTarget} target
 */
async function openPromote(page, target) {
  /** @type {PromoteDialog} */
  const d = { kind: 'promote', target, preview: loading() };
  page.dialog = d;
  update();
  const { pipeline, service, from, to } = target;
  try {
    d.preview = { loading: false, value: await api('POST', '/api/promotions/preview', { pipeline, service, from, to }) };
  } catch (e) {
    d.preview = { loading: false, error: messageOf(e) };
  }
  if (current(page) && page.dialog === d) update();
}

/**
 * The confirmation of a promotion: the file, each field old → new, the source revision, the diff,
 * and force with a reason when the checks fail; then the commit made.
 * @param {AppPage} page
 * @param {PromoteDialog} d
 * @param {() => void} close
 */
function promoteDialogView(page, d, close) {
  const t = d.target;
  const p = d.preview.value;
  const title = html`<h2>Promote ${t.service} ${t.from} → ${t.to}</h2>`;
  const cancel = html`<div class="buttons"><button type="button" data-cancel data-testid="promote-cancel" @click=${close}>${d.result ? 'Close' : 'Cancel'}</button></div>`;
  let body;
  if (d.result) {
    const r = d.result;
    body = html`${title}<p data-testid="promote-result">${r.result === 'promoted' && r.promotion
      ? html`Promoted: commit <span class="mono">${short(r.promotion.commit)}</span> to ${t.application}.`
      : html`Nothing to commit: ${t.to} already has ${t.from}'s values.`}</p>${cancel}`;
  } else if (d.preview.error) {
    body = html`${title}<p class="error" data-testid="promote-error">${d.preview.error}</p>${cancel}`;
  } else if (!p) {
    body = html`${title}<p class="muted">Computing the changes…</p>${cancel}`;
  } else {
    const changes = p.changes || [];
    /** @param {SubmitEvent} e */
    const confirm = async (e) => {
      e.preventDefault();
      const form = /** @type {HTMLFormElement} */ (e.currentTarget);
      const force = !p.checksPassed && field(form, 'force').checked;
      const reason = force ? field(form, 'reason').value : '';
      d.busy = true;
      update();
      await act(async () => {
        /** @type {PromoteAnswer} */
        // The revision this preview read: if the source moved since, the server refuses (409) rather
        // than commit something other than what was confirmed.
        const r = await api('POST', '/api/promotions', { pipeline: t.pipeline, service: t.service, from: t.from, to: t.to, force, reason, expectedSourceRevision: p.sourceRevision });
        d.result = r;
        loadPromotions(page);
      });
      d.busy = false;
      if (current(page) && page.dialog === d) update();
    };
    body = html`<form id="dialog-form" @submit=${confirm}>${title}
      <p>File <span class="mono" data-testid="promote-path">${p.path}</span>, values read from ${p.sourceApplication} at <span class="mono" data-testid="promote-source-revision">${short(p.sourceRevision)}</span>.</p>
      ${changes.length ? html`<table data-testid="promote-changes"><thead><tr><th>Field</th><th>${t.to} now</th><th>Promoted</th></tr></thead><tbody>
        ${repeat(changes, (c) => c.field, (c) => html`<tr data-testid="promote-change" data-field=${c.field}><td class="mono">${c.field}</td><td class="mono">${c.old}</td><td class="mono">${c.new}</td></tr>`)}
      </tbody></table>
      <div class="diff" data-testid="promote-diff">${(p.diff || '').split('\n').map((l) => html`<span class=${lineClass(l)}>${l || ' '}</span>`)}</div>`
      : html`<p class="empty" data-testid="promote-nothing">Nothing to promote: ${t.to} already has ${t.from}'s values.</p>`}
      ${p.checksPassed ? nothing : html`<p class="error" data-testid="promote-check">${p.checkFailure}</p>
      <div class="row"><label><input type="checkbox" name="force" data-testid="promote-force"> Force (override the failing check)</label></div>
      <div class="row"><label>Reason (required to force) <input name="reason" data-testid="promote-reason"></label></div>`}
      <div class="buttons"><button type="button" data-cancel @click=${close}>Cancel</button><button type="submit" class="primary" data-testid="promote-confirm" ?disabled=${!changes.length || !!d.busy}>Promote</button></div>
    </form>`;
  }
  return html`<div class="dialog" role="dialog" aria-modal="true"><div>${body}</div></div>`;
}

/** @param {Load<AppPromotions>} pr */
function promotionsView(pr) {
  const items = (pr.value && pr.value.items) || [];
  if (!items.length) return nothing;
  return html`<h2>Promotions</h2><table data-testid="promotions-table"><thead><tr><th>Time</th><th>From → To</th><th>Changes</th><th>Commit</th><th>User</th><th>Forced</th></tr></thead><tbody>
      ${repeat(items, (r) => r.commit, (r) => html`<tr data-testid="promotion-row" data-commit=${r.commit}><td>${r.time}</td><td>${r.service}: ${r.from} → ${r.to}</td>
        <td class="mono">${(r.changes || []).map((c) => `${c.field} ${c.old} → ${c.new}`).join(', ')}</td><td class="mono">${short(r.commit)}</td><td>${r.user}</td><td>${r.forced ? `yes: ${r.reason || ''}` : 'no'}</td></tr>`)}
    </tbody></table>`;
}

// ---------------------------------------------------------------------------------------------
// ApplicationSets and clusters

/**
 * @template T
 * @param {Page} page
 * @param {(value: T | undefined, error: string | undefined) => void} set
 * @param {string} path
 * @param {(answer: any) => T} pick
 */
async function loadPage(page, set, path, pick) {
  try {
    const value = pick(await api('GET', path));
    if (!current(page)) return;
    set(value, undefined);
  } catch (e) {
    if (!current(page)) return;
    set(undefined, messageOf(e));
  }
  update();
}

function openAppSets() {
  /** @type {AppSetsPage} */
  const page = { page: 'appsets', items: loading() };
  show(page);
  loadPage(page, (value, error) => {
    page.items = { loading: false, value, error };
    if (error) showError(error);
  }, '/api/applicationsets', (r) => /** @type {AppSetSummary[]} */ (r.items || []));
}

/**
 * Whether a condition is bad news: `ErrorOccurred` when True (an error is a True condition of that
 * type, `ErrorOccurred=False` says there is none), any other type when not True
 * (`ResourcesUpToDate=False`); `RolloutProgressing` is neither.
 * @param {Condition} c
 */
const conditionBad = (c) => (c.type === 'ErrorOccurred' ? c.status === 'True' : c.type !== 'RolloutProgressing' && c.status !== 'True');
/** @param {Condition} c */
const conditionMark = (c) => html`<span class=${conditionBad(c) ? 'cond-bad' : 'cond-ok'} data-testid="condition-mark" data-bad=${conditionBad(c) ? 'true' : 'false'}>${conditionBad(c) ? '✖' : '✔'}</span>`;

/** @param {AppSetsPage} page */
function appSetsView(page) {
  const items = page.items.value;
  if (!items) return html`<h1>ApplicationSets</h1><p class="muted">Loading…</p>`;
  if (!items.length) return html`<h1>ApplicationSets</h1><p class="empty">No ApplicationSets.</p>`;
  return html`<h1>ApplicationSets</h1><table><thead><tr><th>Name</th><th>Project</th><th>Generators</th><th>Applications</th><th>Conditions</th><th>Rollout</th></tr></thead><tbody>
      ${repeat(items, (s) => s.name, (s) => html`<tr data-testid="appset-row" data-appset=${s.name}><td><a href="/applicationsets/${s.name}" data-link>${s.name}</a></td><td>${s.project}</td><td>${s.generators}</td><td>${s.applications}</td>
        <td>${(s.conditions || []).map((c) => html`<div>${conditionMark(c)} ${c.type}=${c.status}${c.message ? `: ${c.message}` : ''}</div>`)}</td>
        <td>${s.rollingSync ? `${(s.rollingSync.steps || []).length} steps` : html`<span class="muted">all at once</span>`}</td></tr>`)}
    </tbody></table>`;
}

/** @param {string} name */
function openAppSet(name) {
  /** @type {AppSetPage} */
  const page = { page: 'appset', name, data: loading() };
  show(page);
  loadPage(page, (value, error) => { page.data = { loading: false, value, error }; }, `/api/applicationsets/${name}`, (r) => /** @type {AppSet} */ (r));
}

/** @param {AppSetPage} page */
function appSetView(page) {
  if (page.data.error) return html`<p class="empty">${page.data.error}</p>`;
  const s = page.data.value;
  if (!s) return nothing;
  const st = s.status || {};
  const steps = st.applicationStatus || [];
  const resources = st.resources || [];
  return html`<h1>ApplicationSet ${page.name}</h1>
    <div class="conditions">${(st.conditions || []).map((c) => html`<div class="notice">${conditionMark(c)} <strong>${c.type}=${c.status}</strong> ${c.message || ''}</div>`)}</div>
    <h2>Generated Applications</h2>
    <table><thead><tr><th>Application</th><th>Sync</th><th>Health</th><th>Rollout step</th><th>Rollout status</th><th>Message</th></tr></thead><tbody>
    ${resources.length ? repeat(resources, (r) => r.name, (r) => {
      const step = steps.find((x) => x.application === r.name) || {};
      return html`<tr><td><a href="/applications/${r.name || ''}" data-link>${r.name}</a></td><td>${syncBadge(r.status)}</td><td>${healthBadge(r.health)}</td><td>${step.step ?? ''}</td><td>${step.status || ''}</td><td>${step.message || ''}</td></tr>`;
    }) : html`<tr><td colspan="6" class="empty">None.</td></tr>`}
    </tbody></table>`;
}

function openClusters() {
  /** @type {ClustersPage} */
  const page = { page: 'clusters', items: loading() };
  show(page);
  loadPage(page, (value, error) => {
    page.items = { loading: false, value, error };
    if (error) showError(error);
  }, '/api/clusters', (/** @type {ClusterList} */ r) => r.items || []);
}

/** @param {string | undefined} s */
const clusterClass = (s) => (s === 'Successful' ? 'h-Healthy' : s === 'Failed' ? 'h-Degraded' : 'h-Unknown');
/** @param {string | undefined} s */
const clusterMark = (s) => (s === 'Successful' ? '✔' : s === 'Failed' ? '✖' : '?');

/** @param {ClustersPage} page */
function clustersView(page) {
  const items = page.items.value;
  if (!items) return html`<h1>Clusters</h1><p class="muted">Loading…</p>`;
  return html`<h1>Clusters</h1><table><thead><tr><th>Name</th><th>Server</th><th>State</th><th>Version</th><th>Labels</th><th>Message</th></tr></thead><tbody>
      ${repeat(items, (c) => c.name, (c) => html`<tr data-testid="cluster-row" data-cluster=${c.name || ''}><td>${c.name}</td><td class="mono">${c.server}</td>
        <td><span class="badge ${clusterClass(c.state)}">${clusterMark(c.state)} ${c.state}</span></td>
        <td>${c.version}</td><td>${Object.entries(c.labels || {}).map(([k, v]) => html`<span class="badge">${k}=${v}</span> `)}</td><td>${c.message}</td></tr>`)}
    </tbody></table>`;
}

// ---------------------------------------------------------------------------------------------
// Policies: what each checks before a sync, whether it compiled, and its recent verdicts (only
// those about Applications the caller may read: the server leaves out the others).

function openPolicies() {
  /** @type {PoliciesPage} */
  const page = { page: 'policies', items: loading() };
  show(page);
  loadPage(page, (value, error) => {
    page.items = { loading: false, value, error };
    if (error) showError(error);
  }, '/api/policies', (r) => /** @type {PolicyItem[]} */ (r.items || []));
}

/**
 * The Application page a verdict's `NAMESPACE/NAME` names.
 * @param {string} application
 */
const applicationName = (application) => application.slice(application.indexOf('/') + 1);

/** @param {PolicyVerdict} v */
function verdictRow(v) {
  const name = applicationName(v.application);
  const denied = v.actions.includes('Deny');
  return html`<tr data-testid="verdict-row" data-application=${name}>
      <td data-label="Time">${when(v.time)}</td>
      <td data-label="Application"><a href="/applications/${encodeURIComponent(name)}" data-link data-testid="verdict-application">${name}</a></td>
      <td data-label="Cluster">${v.cluster}</td>
      <td data-label="Object" class="mono">${v.object}</td>
      <td data-label="Actions"><span class="badge ${denied ? 'h-Degraded' : 'h-Missing'}">${denied ? '✖' : '⚠'} ${v.actions.join(', ')}</span></td>
      <td data-label="Message">${v.message}</td>
    </tr>`;
}

/** @param {PolicyItem} p */
function policyView(p) {
  const verdicts = p.recentVerdicts || [];
  return html`<section class="policy" data-testid="policy" data-policy=${p.name}>
    <div class="header">
      <h2 data-testid="policy-name">${p.name}</h2>
      <span class="badge ${p.ready ? 'h-Healthy' : 'h-Degraded'}" data-testid="policy-ready" data-ready=${String(p.ready)}>${p.ready ? '✔ Ready' : '✖ Not ready'}</span>
      <dl class="facts">
        <dt>Actions</dt><dd data-testid="policy-actions">${p.validationActions.join(', ')}</dd>
        <dt>Clusters</dt><dd class=${p.clusterSelector ? 'mono' : 'muted'}>${p.clusterSelector || 'every cluster'}</dd>
        <dt>Projects</dt><dd class=${p.projects.length ? '' : 'muted'}>${p.projects.length ? p.projects.join(', ') : 'every project'}</dd>
      </dl>
    </div>
    ${p.ready ? nothing : html`<p class="dialog-error policy-error" data-testid="policy-error">${p.readyMessage}</p>`}
    ${verdicts.length ? html`<table class="verdicts"><thead><tr><th>Time</th><th>Application</th><th>Cluster</th><th>Object</th><th>Actions</th><th>Message</th></tr></thead><tbody>
        ${verdicts.map(verdictRow)}
      </tbody></table>`
      : html`<p class="muted" data-testid="policy-no-verdicts">No recent verdicts about Applications you may read.</p>`}
  </section>`;
}

/** @param {PoliciesPage} page */
function policiesView(page) {
  const items = page.items.value;
  if (!items) return html`<h1>Policies</h1><p class="muted">${page.items.error || 'Loading…'}</p>`;
  if (!items.length) return html`<h1>Policies</h1><p class="empty">No policies.</p>`;
  return html`<h1>Policies</h1>${repeat(items, (p) => p.name, policyView)}`;
}

route();
