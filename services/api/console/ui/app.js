// QueueFlow operator console: plain JavaScript, no framework, nothing loaded from another host.
//
// The page is one hash-routed document (#/jobs?status=failed, #/workflows/<id>, ...), so every view
// has a link that reloads to the same view. The operator's tenant token lives in sessionStorage
// under "queueflow.token" only (never localStorage or a cookie) and goes to the API as
// `Authorization: Bearer`; a 401 anywhere brings the sign-in back. Lists page by keyset
// (`next_cursor`) and never ask for an exact total unless the operator clicks "Count", so views
// stay fast on tenants with millions of jobs. Live views poll, or read the server's SSE streams
// with fetch() (EventSource cannot send an Authorization header). Actions that change something
// exist only for a read-write credential: with a read-only one they are not built at all.
//
// With single sign-on (--oidc-issuer; docs/access.md) the console signs in through the identity
// provider instead: the server keeps the session and the browser holds only its HttpOnly cookie,
// which the API calls carry (no Authorization header); each call that changes something sends the
// session's CSRF token (from auth/session, kept in memory only) as X-CSRF-Token. The token-paste
// sign-in is offered beside it only when the server says so (--console-token-login).
"use strict";

(() => {
  const TOKEN_KEY = "queueflow.token";
  const API = new URL("../api/v1/", document.baseURI); // "/api/v1/" when the page is "/ui/"
  const REFRESH_MS = 5000;
  const SLOW_REFRESH_MS = 15000;
  const RECONNECT_MS = 3000;
  const PAGE_SIZE = 50;
  const DEFAULT_BULK_LIMIT = 100;
  // The SVG namespace, as the HTML parser knows it (no namespace literal in this file).
  const SVG_NS = (() => {
    const template = document.createElement("template");
    template.innerHTML = "<svg></svg>";
    return template.content.firstElementChild.namespaceURI;
  })();

  const JOB_STATUSES = ["pending", "running", "retrying", "completed", "failed", "cancelled"];
  const ACTIVE_JOB = new Set(["pending", "running", "retrying"]);
  const TERMINAL_JOB = new Set(["completed", "failed", "cancelled"]);
  const RETRYABLE_JOB = new Set(["failed", "cancelled"]);
  const WORKFLOW_STATUSES = ["created", "running", "completed", "failed", "partially_failed", "cancelled"];
  const TERMINAL_WORKFLOW = new Set(["completed", "failed", "partially_failed", "cancelled"]);
  const RETRYABLE_WORKFLOW = new Set(["failed", "partially_failed", "cancelled"]);

  const AUTH = new URL("auth/", document.baseURI); // the sign-in routes, "/ui/auth/"
  const state = { token: null, session: null, sso: false, tokenLogin: true, tenant: null, role: "viewer", view: null, routed: false };
  const signedIn = () => Boolean(state.token || state.session);
  // The roles (docs/access.md), each including the ones before it.
  const ROLE_RANK = { viewer: 0, operator: 1, admin: 2 };
  // Whether the signed-in credential's role is at least `role`: what it cannot do is not built.
  const may = (role) => ROLE_RANK[state.role] >= ROLE_RANK[role];
  const $ = (id) => document.getElementById(id);

  // --- errors and the API ---------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }
  class SignedOut extends Error {}

  const isAbort = (error) => error && error.name === "AbortError";

  async function errorMessage(response) {
    try {
      const body = await response.json();
      if (body && typeof body.error === "string") return body.error;
    } catch {
      // not the error body: fall through to the status line
    }
    return `${response.status} ${response.statusText || "error"}`.trim();
  }

  function apiUrl(path, query) {
    const url = new URL(path, API);
    for (const [key, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
    }
    return url;
  }

  async function apiFetch(path, { method = "GET", query, body, signal, accept = "application/json" } = {}) {
    const token = state.token;
    const session = state.session;
    const headers = { Accept: accept };
    if (session) {
      // The session cookie goes along (same origin); a change also carries the CSRF token.
      if (method !== "GET") headers["X-CSRF-Token"] = session.csrf_token;
    } else {
      headers.Authorization = `Bearer ${token}`;
    }
    const init = { method, headers, signal, cache: "no-store", credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(apiUrl(path, query), init);
    } catch (error) {
      if (isAbort(error)) throw error;
      throw new ApiError(0, `the server could not be reached (${error.message})`);
    }
    if (response.status === 401) {
      const reason = await errorMessage(response);
      // Several requests can be refused at once: the first one signs out and says why.
      if (session && state.session === session) signOut("Your single sign-on session has ended. Sign in again.");
      else if (!session && state.token === token) signOut(`The server did not accept the token: ${reason}. Sign in again.`);
      throw new SignedOut("signed out");
    }
    if (!response.ok) throw new ApiError(response.status, await errorMessage(response));
    return response;
  }

  async function api(method, path, options = {}) {
    const response = await apiFetch(path, { ...options, method });
    if (response.status === 204) return null;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  const enc = encodeURIComponent;

  // --- DOM helpers ----------------------------------------------------------------------------

  function append(parent, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      parent.append(child instanceof Node ? child : String(child));
    }
    return parent;
  }

  function build(element, props, children) {
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") element.setAttribute("class", value);
      else if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value);
      else element.setAttribute(key, value === true ? "" : String(value));
    }
    return append(element, children);
  }

  const h = (tag, props, ...children) => build(document.createElement(tag), props, children);
  const svg = (tag, props, ...children) => build(document.createElementNS(SVG_NS, tag), props, children);
  const hidden = (text) => h("span", { class: "visually-hidden" }, text);

  function pretty(value) {
    return h("pre", { class: "json", tabindex: "0" }, JSON.stringify(value ?? null, null, 2));
  }

  // --- ids ------------------------------------------------------------------------------------

  // Job and workflow ids are UUIDv7: their first 12 hex digits are the creation time in
  // milliseconds, which jobs made within a minute share. An id is shown by its last group (48
  // random bits) after an ellipsis, "…3f9c0a1e52b7", with the whole id as its title and a button
  // beside it that copies the whole id; an id of another shape (a worker's name) is shown whole.
  const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

  function shortId(id) {
    const text = String(id);
    return UUID_RE.test(text) ? `…${text.slice(-12)}` : text;
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // No Clipboard API (a page over plain http from another host): copy a selected text field.
      const area = h("textarea", { class: "copy-buffer", readonly: true, "aria-hidden": "true" }, text);
      document.body.append(area);
      area.select();
      try {
        return document.execCommand("copy");
      } finally {
        area.remove();
      }
    }
  }

  // A button that puts `value` on the clipboard: `label` names it (for screen readers), `title`
  // on hover, and the toasts say what was copied (or how to copy it by hand).
  function copyValueButton(value, { label, title, copied, failed }) {
    const icon = svg(
      "svg",
      { viewBox: "0 0 16 16", width: "14", height: "14", "aria-hidden": "true", focusable: "false" },
      svg("rect", { x: "5.5", y: "5.5", width: "8", height: "9", rx: "1.5" }),
      svg("path", { d: "M3.5 10.5h-1v-8a1 1 0 0 1 1-1h7v1" }),
    );
    return h(
      "button",
      {
        type: "button",
        class: "copy quiet small",
        title,
        "data-copy": value,
        onclick: async () => {
          if (await copyText(value)) toast(copied);
          else toast(failed, "error");
        },
      },
      icon,
      hidden(label),
    );
  }

  function copyButton(noun, id) {
    return copyValueButton(String(id), {
      label: `Copy ${noun} id`,
      title: `Copy ${id}`,
      copied: `Copied ${noun} id ${id}.`,
      failed: `Could not copy: select the ${noun} id ${id} and copy it.`,
    });
  }

  // An id as every view shows it: a link to its page (when `href`), in short or (`full`) whole,
  // or after a `label`, with its copy button.
  function idRef(noun, id, href, { full = false, label = "", fk } = {}) {
    const text = `${label}${full ? id : shortId(id)}`;
    const props = { class: "mono", title: String(id), "data-id": String(id), "data-fk": fk };
    return h("span", { class: "id-ref" }, href ? h("a", { href, ...props }, text) : h("span", props, text), copyButton(noun, id));
  }

  function badge(status, label) {
    return h("span", { class: `badge st-${status}` }, label ?? String(status).replace(/_/g, " "));
  }

  // --- time -----------------------------------------------------------------------------------

  function relTime(iso, now = Date.now()) {
    const at = Date.parse(iso);
    if (Number.isNaN(at)) return String(iso);
    const diff = Math.round((at - now) / 1000);
    const abs = Math.abs(diff);
    if (abs < 5) return "just now";
    let text;
    if (abs < 60) text = `${abs} s`;
    else if (abs < 3600) text = `${Math.floor(abs / 60)} min`;
    else if (abs < 86400) text = `${Math.floor(abs / 3600)} h`;
    else text = `${Math.floor(abs / 86400)} d`;
    return diff < 0 ? `${text} ago` : `in ${text}`;
  }

  function absTime(iso) {
    const at = new Date(iso);
    if (Number.isNaN(at.getTime())) return String(iso);
    return `${at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" })} (${at.toISOString()})`;
  }

  function timeEl(iso) {
    if (!iso) return h("span", { class: "muted" }, "—");
    return h("time", { datetime: iso, title: absTime(iso), "data-rel": "" }, relTime(iso));
  }

  function duration(secs) {
    if (secs === null || secs === undefined) return "—";
    if (secs < 60) return `${secs} s`;
    if (secs < 3600) return `${Math.floor(secs / 60)} min`;
    if (secs < 86400) return `${Math.floor(secs / 3600)} h ${Math.floor((secs % 3600) / 60)} min`;
    return `${Math.floor(secs / 86400)} d ${Math.floor((secs % 86400) / 3600)} h`;
  }

  function refreshTimes() {
    const now = Date.now();
    for (const el of document.querySelectorAll("time[data-rel]")) el.textContent = relTime(el.dateTime, now);
  }

  // --- notices --------------------------------------------------------------------------------

  function toast(message, kind = "ok") {
    const el = h("div", { class: `toast ${kind === "error" ? "error" : ""}`, role: kind === "error" ? "alert" : null }, message);
    $("toasts").append(el);
    setTimeout(() => el.remove(), kind === "error" ? 12000 : 6000);
  }

  function reportError(error) {
    if (error instanceof SignedOut || isAbort(error)) return;
    toast(error.message || String(error), "error");
  }

  function showBanner(message) {
    const banner = $("banner");
    banner.textContent = message;
    banner.hidden = false;
  }

  function clearBanner() {
    $("banner").hidden = true;
  }

  function errorPanel(error, retry) {
    return h(
      "div",
      { class: "error-panel", role: "alert" },
      h("strong", {}, error instanceof ApiError && error.status ? `Error ${error.status}: ` : "Error: "),
      error.message || String(error),
      retry ? [" ", h("button", { type: "button", class: "small", onclick: retry }, "Try again")] : null,
    );
  }

  // A confirmation for destructive actions: resolves true when the operator confirms.
  function confirmAction({ title, text, confirm }) {
    const dialog = $("confirm");
    if (dialog.open) return Promise.resolve(false); // one question at a time
    $("confirm-title").textContent = title;
    $("confirm-text").replaceChildren(...[text].flat().map((t) => (t instanceof Node ? t : h("p", {}, t))));
    $("confirm-yes").textContent = confirm;
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.showModal();
      $("confirm-no").focus();
    });
  }

  // A button that runs an action; only built for a role that may run it (callers check `may`).
  function actionButton(label, run, { confirm, cls, srLabel, after } = {}) {
    const button = h("button", { type: "button", class: cls }, label, srLabel ? hidden(` ${srLabel}`) : null);
    button.addEventListener("click", async () => {
      if (confirm && !(await confirmAction(confirm))) return;
      button.disabled = true;
      try {
        const message = await run();
        if (message) toast(message);
        if (after) await after();
      } catch (error) {
        reportError(error);
      } finally {
        button.disabled = false;
      }
    });
    return button;
  }

  // --- view lifecycle -------------------------------------------------------------------------

  // Each view gets a context: its fetches abort and its timers stop when the operator leaves it.
  class ViewContext {
    constructor() {
      this.controller = new AbortController();
      this.timers = new Set();
      this.refresh = null;
    }
    get signal() {
      return this.controller.signal;
    }
    get alive() {
      return !this.controller.signal.aborted;
    }
    api(method, path, options = {}) {
      return api(method, path, { ...options, signal: this.signal });
    }
    wait(ms) {
      return new Promise((resolve) => {
        const onAbort = () => resolve();
        const timer = setTimeout(() => {
          this.timers.delete(timer);
          this.signal.removeEventListener("abort", onAbort);
          resolve();
        }, ms);
        this.timers.add(timer);
        this.signal.addEventListener("abort", onAbort, { once: true });
      });
    }
    // Runs `load` now (a failure is the caller's, shown in place of the view), then every `ms`
    // while the view is open and the tab visible; a later failure shows a banner (the view keeps
    // its last data) until a run succeeds.
    async poll(load, ms = REFRESH_MS) {
      this.refresh = async () => {
        try {
          await load();
          clearBanner();
        } catch (error) {
          if (error instanceof SignedOut || isAbort(error) || !this.alive) return;
          showBanner(`Could not refresh: ${error.message}. Retrying.`);
        }
      };
      await load();
      const loop = async () => {
        await this.wait(ms);
        if (!this.alive) return;
        if (!document.hidden) await this.refresh();
        loop();
      };
      loop();
    }
    dispose() {
      this.controller.abort();
      for (const timer of this.timers) clearTimeout(timer);
      this.timers.clear();
    }
  }

  function pageHead(title, { badges = [], actions = [], extra = [] } = {}) {
    return h(
      "div",
      { class: "page-head" },
      h("h1", { tabindex: "-1" }, title),
      badges,
      extra,
      actions.length ? h("div", { class: "actions" }, actions) : null,
    );
  }

  function updatedNote() {
    const el = h("span", { class: "updated", "aria-live": "off" });
    el.touch = () => {
      el.replaceChildren("Updated ", timeEl(new Date().toISOString()));
    };
    return el;
  }

  // Replaces `container`'s content only when the data changed, keeping keyboard focus on the
  // element with the same data-fk (focus key) when there is one.
  function renderIfChanged(container, data, render) {
    const signature = JSON.stringify(data);
    if (container.signature === signature) return;
    container.signature = signature;
    const focused = document.activeElement;
    const key = focused && container.contains(focused) ? focused.getAttribute("data-fk") : null;
    container.replaceChildren(...[render()].flat().filter(Boolean));
    if (key) container.querySelector(`[data-fk="${CSS.escape(key)}"]`)?.focus();
  }

  function table(headers, rows, empty) {
    if (!rows.length) return h("div", { class: "empty" }, empty);
    return h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", { scope: "col", class: cls }, label)))),
        h("tbody", {}, rows),
      ),
    );
  }

  // --- routing --------------------------------------------------------------------------------

  function parseHash() {
    const raw = location.hash.replace(/^#/, "") || "/";
    const cut = raw.indexOf("?");
    const path = cut < 0 ? raw : raw.slice(0, cut);
    const params = new URLSearchParams(cut < 0 ? "" : raw.slice(cut + 1));
    let parts;
    try {
      parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    } catch {
      parts = ["?"];
    }
    return { parts, params };
  }

  function hashFor(view, params) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) if (value) query.set(key, value);
    const text = query.toString();
    return `#/${view}${text ? `?${text}` : ""}`;
  }

  function go(hash) {
    if (location.hash === hash) state.view?.refresh?.();
    else location.hash = hash;
  }

  const VIEWS = {
    "": { title: "Overview", list: overviewView },
    queues: { title: "Queues", list: queuesView, detail: queueView },
    jobs: { title: "Jobs", list: jobsView, detail: jobView },
    workflows: { title: "Workflows", list: workflowsView, detail: workflowView },
    dlq: { title: "Dead letters", list: deadLettersView, detail: deadLetterView },
    cron: { title: "Cron", list: cronView },
    limits: { title: "Limits", list: limitsView },
    "worker-keys": { title: "Worker keys", list: workerKeysView },
    audit: { title: "Audit log", list: auditView },
    tasks: { title: "Tasks", list: tasksView },
    workers: { title: "Workers", list: workersView },
    "push-endpoints": { title: "Push endpoints", list: pushEndpointsView, detail: pushEndpointView },
  };

  function route() {
    if (!signedIn()) return;
    const { parts, params } = parseHash();
    const [name = "", id] = parts;
    const entry = VIEWS[name];
    state.view?.dispose();
    clearBanner();
    const ctx = new ViewContext();
    state.view = ctx;
    const root = $("view");
    root.replaceChildren();
    for (const link of document.querySelectorAll("#nav a")) {
      if (link.dataset.view === (name || "overview")) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    let render;
    if (!entry || parts.length > 2 || (id !== undefined && !entry.detail)) {
      document.title = "Not found · QueueFlow";
      render = notFoundView;
    } else {
      document.title = `${id !== undefined ? `${entry.title} ${shortId(id)}` : entry.title} · QueueFlow`;
      render = id !== undefined ? entry.detail : entry.list;
    }
    const moveFocus = state.routed;
    state.routed = true;
    Promise.resolve(render(ctx, root, id, params))
      .catch((error) => {
        if (error instanceof SignedOut || isAbort(error) || !ctx.alive) return;
        root.append(errorPanel(error, () => route()));
      })
      .finally(() => {
        // After a navigation, focus goes to the new view's heading, unless the operator has
        // already moved it into the view while it loaded.
        const active = document.activeElement;
        const untouched = !active || active === document.body || !root.contains(active);
        if (moveFocus && ctx.alive && untouched) root.querySelector("h1")?.focus({ preventScroll: false });
      });
  }

  function notFoundView(ctx, root) {
    root.append(
      pageHead("Nothing here"),
      h("p", {}, "This link names no view of the console. ", h("a", { href: "#/" }, "Go to the overview"), "."),
    );
  }

  // --- sign-in --------------------------------------------------------------------------------

  function showSignedIn(who) {
    state.tenant = who.tenant;
    // (a server before roles answers `access` only: read-write was everything)
    state.role = who.role in ROLE_RANK ? who.role : who.access === "read_write" ? "admin" : "viewer";
    $("identity-tenant").textContent = `Tenant ${who.tenant}`;
    const access = $("identity-access");
    access.textContent = state.role;
    access.className = `access ${may("operator") ? "" : "read-only"}`;
    access.title = {
      viewer: "This token can only look: actions are hidden.",
      operator: "This token may cancel, retry, replay, pause and resume; settings are hidden.",
      admin: "This token may change everything of its tenant.",
    }[state.role];
    access.dataset.role = state.role;
    for (const link of document.querySelectorAll("#nav a[data-role]")) link.closest("li").hidden = !may(link.dataset.role);
    $("signin").hidden = true;
    $("nav").hidden = false;
    $("identity").hidden = false;
    $("view").hidden = false;
  }

  function signOut(message = "", kind = "error") {
    state.token = null;
    state.session = null;
    $("identity-name").hidden = true;
    $("signin-sso").hidden = !state.sso;
    $("signin-token-help").hidden = !state.tokenLogin;
    $("signin-form").hidden = !state.tokenLogin;
    state.view?.dispose();
    state.view = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("view").replaceChildren();
    $("view").hidden = true;
    $("nav").hidden = true;
    $("identity").hidden = true;
    clearBanner();
    $("signin-message").textContent = message;
    $("signin-message").className = `signin-message ${kind}`;
    $("signin").hidden = false;
    $("signin-token").value = "";
    document.title = "Sign in · QueueFlow";
    if (state.tokenLogin) $("signin-token").focus();
    else $("signin-sso-button").focus();
  }

  // With single sign-on: the server's session, then the whoami every sign-in ends with.
  async function signInWithSession(session) {
    state.session = session;
    const who = await api("GET", "whoami"); // a 401 signs out again, with the message
    showSignedIn(who);
    $("identity-name").textContent = session.name;
    $("identity-name").hidden = false;
    route();
  }

  async function endSession() {
    const session = state.session;
    let location = "./?signed_out=1";
    try {
      const response = await fetch(new URL("logout", AUTH), {
        method: "POST",
        headers: { "X-CSRF-Token": session.csrf_token, Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
      if (response.ok) location = (await response.json()).location;
    } catch {
      // the server could not be reached: forget the session here all the same
    }
    signOut("Signing out…", "info");
    window.location.assign(location);
  }

  // What the server offers: single sign-on (and whether the token form stays), and a session.
  async function authState() {
    try {
      const response = await fetch(new URL("session", AUTH), { credentials: "same-origin", cache: "no-store" });
      if (response.ok) return await response.json();
    } catch {
      // an older server or none reachable: the token sign-in, as before
    }
    return { sso: false, token_login: true, session: null };
  }

  // A message the sign-in's redirect left in the query (?signin_error=..., ?signed_out=1), shown
  // once and taken out of the address.
  function takeSignInNotice() {
    const params = new URLSearchParams(window.location.search);
    const error = params.get("signin_error");
    const out = params.has("signed_out");
    if (error === null && !out) return null;
    history.replaceState(null, "", window.location.pathname + window.location.hash);
    return error !== null ? { text: `Could not sign in: ${error}.`, kind: "error" } : { text: "Signed out.", kind: "info" };
  }

  async function signIn(token) {
    state.token = token;
    const who = await api("GET", "whoami"); // a 401 signs out again, with the message
    sessionStorage.setItem(TOKEN_KEY, token);
    showSignedIn(who);
    route();
  }

  function setUpSignIn() {
    $("signin-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const token = $("signin-token").value.trim();
      if (!token) return;
      const button = event.submitter || $("signin-form").querySelector("button");
      button.disabled = true;
      $("signin-message").textContent = "";
      try {
        await signIn(token);
      } catch (error) {
        if (!(error instanceof SignedOut)) {
          state.token = null;
          $("signin-message").textContent = `Could not sign in: ${error.message}`;
        }
      } finally {
        button.disabled = false;
      }
    });
    $("sign-out").addEventListener("click", () => {
      if (state.session) endSession();
      else signOut("Signed out: the token is forgotten.", "info");
    });
    $("signin-sso-button").addEventListener("click", () => {
      const url = new URL("login", AUTH);
      if (window.location.hash.startsWith("#/")) url.searchParams.set("next", window.location.hash);
      window.location.assign(url);
    });
  }

  // --- overview -------------------------------------------------------------------------------

  const STAT_CARDS = [
    ["jobs_created", "Jobs stored", "#/jobs", ""],
    ["jobs_completed", "Completed", "#/jobs?status=completed", "completed"],
    ["jobs_failed", "Failed", "#/jobs?status=failed", "failed"],
    ["jobs_retried", "Retries", null, "retrying"],
    ["jobs_dead_lettered", "Dead letters", "#/dlq", "failed"],
    ["workflows_created", "Workflows", "#/workflows", ""],
    ["workflows_completed", "Workflows completed", "#/workflows?status=completed", "completed"],
    ["workflows_failed", "Workflows failed", "#/workflows?status=failed", "failed"],
  ];

  function backlogLegend() {
    return h(
      "div",
      { class: "legend", "aria-hidden": "true" },
      ["pending", "scheduled", "running"].map((s) => h("span", {}, h("span", { class: `swatch st-${s}` }), s)),
    );
  }

  function backlogRows(queues) {
    if (!queues.length) return h("div", { class: "empty" }, "No queue has jobs waiting or running.");
    const max = Math.max(1, ...queues.map((q) => q.pending + q.scheduled + q.running));
    return queues.map((q) => {
      const total = q.pending + q.scheduled + q.running;
      const bar = h("div", {
        class: "bar",
        role: "img",
        "aria-label": `${q.queue}: ${q.pending} pending, ${q.scheduled} scheduled, ${q.running} running`,
      });
      for (const key of ["pending", "scheduled", "running"]) {
        if (!q[key]) continue;
        const segment = h("span", { class: `st-${key}`, title: `${q[key]} ${key}` });
        segment.style.width = `${(q[key] / max) * 100}%`;
        bar.append(segment);
      }
      return h(
        "div",
        { class: "backlog-row", "data-queue": q.queue },
        h(
          "div",
          { class: "queue-name" },
          h("a", { href: hashFor("jobs", { queue: q.queue }), "data-fk": `q:${q.queue}` }, q.queue),
          q.paused ? badge("paused") : null,
        ),
        bar,
        h(
          "div",
          { class: "counts" },
          `${total} · ${q.pending} pending · ${q.scheduled} scheduled · ${q.running} running`,
          q.oldest_pending_age_secs != null ? ` · oldest waiting ${duration(q.oldest_pending_age_secs)}` : "",
        ),
      );
    });
  }

  async function overviewView(ctx, root, _id, params) {
    const updated = updatedNote();
    const cards = h("div", { class: "cards" });
    const backlog = h("div", { class: "backlog panel" });
    const failures = h("div");
    const charts = chartsPanel(ctx, { params, hashOf: (w) => hashFor("", { window: w }) });
    root.append(
      pageHead("Overview", {
        extra: [updated],
        actions: [h("button", { type: "button", class: "quiet", onclick: () => ctx.refresh() }, "Refresh")],
      }),
      h("p", { class: "subtitle" }, `Tenant ${state.tenant}. Refreshes every ${REFRESH_MS / 1000} seconds.`),
      h("section", { "aria-labelledby": "totals-h" }, h("h2", { id: "totals-h" }, "Totals"), cards),
      h(
        "section",
        { "aria-labelledby": "backlog-h" },
        h("h2", { id: "backlog-h" }, "Backlog by queue"),
        backlogLegend(),
        backlog,
      ),
      charts,
      h(
        "section",
        { "aria-labelledby": "failures-h" },
        h("h2", { id: "failures-h" }, "Latest failures"),
        failures,
      ),
    );
    await ctx.poll(async () => {
      const [stats, queues, failed] = await Promise.all([
        ctx.api("GET", "stats"),
        ctx.api("GET", "queues"),
        ctx.api("GET", "jobs", { query: { status: "failed", limit: 5 } }),
        charts.load(),
      ]);
      const pending = queues.queues.reduce((n, q) => n + q.pending, 0);
      const running = queues.queues.reduce((n, q) => n + q.running, 0);
      const scheduled = queues.queues.reduce((n, q) => n + q.scheduled, 0);
      renderIfChanged(cards, { stats, pending, running, scheduled }, () => [
        ...[
          ["Pending now", pending, "#/jobs?status=pending", ""],
          ["Running now", running, "#/jobs?status=running", ""],
          ["Scheduled", scheduled, null, ""],
        ].map(([name, value, href, cls]) => statCard(name, value, href, cls)),
        ...STAT_CARDS.map(([key, name, href, cls]) => statCard(name, stats[key], href, cls)),
      ]);
      renderIfChanged(backlog, queues.queues, () => backlogRows(queues.queues));
      renderIfChanged(failures, failed.jobs, () => jobTable(failed.jobs, "No failed jobs."));
      updated.touch();
    });
  }

  function statCard(name, value, href, cls) {
    const body = [h("div", { class: "value" }, Number(value).toLocaleString()), h("div", { class: "name" }, name)];
    return h(
      "div",
      { class: `card ${cls}` },
      href ? h("a", { href, class: "card-link", "aria-label": `${name}: ${value}`, "data-fk": `c:${name}` }, body) : body,
    );
  }

  // --- charts (GET /api/v1/stats/series) ------------------------------------------------------
  //
  // Small SVG line charts of the per-minute rollup the janitor writes (docs/console.md, "Charts"):
  // one point per step, axes with units, the statuses' colours; hovering a step or moving along
  // it with the arrow keys shows its values (announced to screen readers), and each chart has a
  // table of every value.

  const CHART_WINDOWS = [
    ["15m", "15 min"],
    ["1h", "1 h"],
    ["6h", "6 h"],
    ["24h", "24 h"],
  ];
  const CHARTS = [
    {
      id: "throughput",
      title: "Completed, failed and retried",
      unit: "jobs",
      metrics: [
        ["completed", "Completed", "st-completed"],
        ["failed", "Failed", "st-failed"],
        ["retried", "Retried", "st-retrying"],
      ],
    },
    { id: "enqueued", title: "Enqueued", unit: "jobs", metrics: [["enqueued", "Enqueued", "st-created"]] },
    {
      id: "backlog",
      title: "Backlog",
      unit: "backlog",
      metrics: [
        ["pending", "Pending", "st-pending"],
        ["scheduled", "Scheduled", "st-scheduled"],
        ["running", "Running", "st-running"],
      ],
    },
    {
      id: "wait",
      title: "Wait time (due to start)",
      unit: "seconds",
      metrics: [
        ["wait_p50", "p50", "st-running"],
        ["wait_p95", "p95", "st-retrying"],
      ],
    },
    {
      id: "run",
      title: "Run time",
      unit: "seconds",
      metrics: [
        ["run_p50", "p50", "st-running"],
        ["run_p95", "p95", "st-retrying"],
      ],
    },
  ];
  const CHART_METRICS = CHARTS.flatMap((c) => c.metrics.map(([metric]) => metric));

  function stepLabel(secs) {
    return secs >= 3600 ? `${secs / 3600} h` : `${secs / 60} min`;
  }

  function secondsLabel(v) {
    if (!v) return "0 s";
    if (v < 0.001) return `${Math.round(v * 1e6)} µs`;
    if (v < 1) return `${+(v * 1000).toPrecision(3)} ms`;
    if (v < 60) return `${+v.toPrecision(3)} s`;
    if (v < 3600) return `${+(v / 60).toPrecision(3)} min`;
    return `${+(v / 3600).toPrecision(3)} h`;
  }

  function chartValue(unit, v) {
    return unit === "seconds" ? secondsLabel(v) : Number(v).toLocaleString();
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function clock(iso) {
    return new Date(iso).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  }

  function stepText(data, i) {
    const start = new Date(data.timestamps[i]);
    const end = new Date(start.getTime() + data.step_secs * 1000);
    const day = start.toLocaleDateString(undefined, { month: "short", day: "numeric" });
    return `${day} ${clock(start)}–${clock(end)}`;
  }

  function unitText(def, data) {
    if (def.unit === "seconds") return "seconds";
    if (def.unit === "backlog") return `jobs, at the end of each ${stepLabel(data.step_secs)}`;
    return `jobs per ${stepLabel(data.step_secs)}`;
  }

  function lineChart(def, data, memory) {
    const W = 640;
    const H = 190;
    const [L, R, T, B] = [62, 14, 12, 26];
    const n = data.timestamps.length;
    const series = def.metrics.map(([metric, label, cls]) => ({
      metric,
      label,
      cls,
      values: (data.series.find((s) => s.metric === metric) || { values: [] }).values,
    }));
    const max = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
    const x = (i) => L + (n <= 1 ? 0 : (i * (W - L - R)) / (n - 1));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const fmt = (v) => chartValue(def.unit, v);
    const units = unitText(def, data);

    const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", "aria-hidden": "true", focusable: "false" });
    for (const f of [0, 0.5, 1]) {
      plot.append(
        svg("line", { class: "grid", x1: L, x2: W - R, y1: y(max * f), y2: y(max * f) }),
        svg("text", { class: "tick", x: L - 6, y: y(max * f) + 4, "text-anchor": "end" }, fmt(max * f)),
      );
    }
    const labels = Math.min(n, 6);
    for (let k = 0; k < labels; k++) {
      const i = Math.round((k * (n - 1)) / Math.max(1, labels - 1));
      const anchor = k === 0 ? "start" : k === labels - 1 ? "end" : "middle";
      plot.append(svg("text", { class: "tick", x: x(i), y: H - 8, "text-anchor": anchor }, clock(data.timestamps[i])));
    }
    plot.append(
      svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }),
      svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
    );
    for (const s of series) {
      plot.append(
        svg("polyline", {
          class: `line ${s.cls}`,
          points: s.values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
        }),
        svg(
          "g",
          { class: `points ${s.cls}`, "data-metric": s.metric },
          s.values.map((v, i) => svg("circle", { class: "point", cx: x(i), cy: y(v), r: 2.5, "data-i": i, "data-value": v })),
        ),
      );
    }
    const cursor = svg("line", { class: "cursor", x1: 0, x2: 0, y1: T, y2: H - B, visibility: "hidden" });
    plot.append(cursor);
    const band = n <= 1 ? W - L - R : (W - L - R) / (n - 1);
    const hits = svg("g", { class: "hits" });
    for (let i = 0; i < n; i++) {
      hits.append(svg("rect", { class: "hit", x: x(i) - band / 2, y: 0, width: band, height: H, "data-i": i }));
    }
    plot.append(hits);

    const tip = h("div", { class: "chart-tip", hidden: true });
    const live = h("div", { class: "visually-hidden", "aria-live": "polite" });
    const frame = h(
      "div",
      {
        class: "chart-plot",
        tabindex: "0",
        role: "group",
        "data-fk": `chart:${def.id}`,
        "aria-label": `${def.title}, ${units}. Left and right arrow keys read each ${stepLabel(data.step_secs)}; the table below lists every value.`,
      },
      plot,
      tip,
      live,
    );
    let current = -1;
    const describe = (i) => `${stepText(data, i)}: ${series.map((s) => `${s.label} ${fmt(s.values[i])}`).join(", ")}`;
    function show(i, announce) {
      current = Math.max(0, Math.min(n - 1, i));
      memory.set(def.id, current);
      cursor.setAttribute("x1", x(current));
      cursor.setAttribute("x2", x(current));
      cursor.setAttribute("visibility", "visible");
      for (const c of plot.querySelectorAll("circle.on")) c.classList.remove("on");
      for (const c of plot.querySelectorAll(`circle[data-i="${current}"]`)) c.classList.add("on");
      tip.replaceChildren(
        h("div", { class: "tip-time" }, stepText(data, current)),
        ...series.map((s) =>
          h("div", { class: "tip-row", "data-metric": s.metric }, h("span", { class: `swatch ${s.cls}` }), `${s.label}: `, h("strong", {}, fmt(s.values[current]))),
        ),
      );
      tip.hidden = false;
      const left = (x(current) / W) * 100;
      tip.style.left = `${left}%`;
      tip.classList.toggle("flip", left > 55);
      if (announce) live.textContent = describe(current);
    }
    function hide() {
      current = -1;
      memory.delete(def.id);
      tip.hidden = true;
      cursor.setAttribute("visibility", "hidden");
      for (const c of plot.querySelectorAll("circle.on")) c.classList.remove("on");
    }
    hits.addEventListener("mouseover", (event) => {
      const i = event.target.getAttribute && event.target.getAttribute("data-i");
      if (i !== null && i !== undefined) show(Number(i), false);
    });
    frame.addEventListener("mouseleave", () => {
      if (document.activeElement !== frame) hide();
    });
    frame.addEventListener("focus", () => {
      if (current < 0) show(n - 1, true);
    });
    frame.addEventListener("blur", hide);
    frame.addEventListener("keydown", (event) => {
      const moves = { ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: n - 1 };
      if (event.key in moves) {
        event.preventDefault();
        event.stopPropagation();
        show(moves[event.key], true);
      } else if (event.key === "Escape") {
        hide();
      }
    });
    if (memory.has(def.id)) show(memory.get(def.id), false);

    const tableView = h(
      "details",
      { class: "chart-table", "data-chart": def.id },
      h("summary", {}, `Table of values: ${def.title.toLowerCase()}`),
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          {},
          h("caption", { class: "visually-hidden" }, `${def.title}, ${units}`),
          h(
            "thead",
            {},
            h("tr", {}, h("th", { scope: "col" }, stepLabel(data.step_secs) === "1 min" ? "Minute" : "Step"), series.map((s) => h("th", { scope: "col", class: "num" }, s.label))),
          ),
          h(
            "tbody",
            {},
            data.timestamps.map((_, i) =>
              h("tr", {}, h("th", { scope: "row" }, stepText(data, i)), series.map((s) => h("td", { class: "num" }, fmt(s.values[i])))),
            ),
          ),
        ),
      ),
    );
    tableView.open = memory.has(`table:${def.id}`);
    tableView.addEventListener("toggle", () => {
      if (tableView.open) memory.set(`table:${def.id}`, true);
      else memory.delete(`table:${def.id}`);
    });

    return h(
      "figure",
      { class: "chart panel", "data-chart": def.id },
      h("figcaption", {}, h("h3", {}, def.title), h("span", { class: "chart-unit" }, units)),
      h("div", { class: "legend", "aria-hidden": "true" }, series.map((s) => h("span", {}, h("span", { class: `swatch ${s.cls}` }), s.label))),
      frame,
      tableView,
    );
  }

  // The charts section of the overview (queue: null, every queue of the tenant) or of a queue's
  // page; `section.load()` reads the series of the chosen window, `section.window()` names it.
  function chartsPanel(ctx, { queue = null, params, hashOf }) {
    const asked = params ? params.get("window") : null;
    let chosen = CHART_WINDOWS.some(([w]) => w === asked) ? asked : "1h";
    const memory = new Map();
    const note = h("p", { class: "chart-note" });
    const grid = h("div", { class: "charts" });
    const picker = h(
      "fieldset",
      { class: "window-picker" },
      h("legend", {}, "Window"),
      CHART_WINDOWS.map(([w, label]) =>
        h("label", {}, h("input", { type: "radio", name: "chart-window", value: w, checked: w === chosen }), label),
      ),
    );
    const section = h(
      "section",
      { class: "charts-section", "aria-labelledby": "charts-h" },
      h("h2", { id: "charts-h" }, queue ? "Activity over time" : "Activity over time, every queue"),
      picker,
      note,
      grid,
    );
    picker.addEventListener("change", (event) => {
      chosen = event.target.value;
      history.replaceState(null, "", hashOf(chosen));
      ctx.refresh?.();
    });
    section.window = () => chosen;
    section.load = async () => {
      const data = await ctx.api("GET", "stats/series", {
        query: { metric: CHART_METRICS.join(","), window: chosen, queue },
      });
      note.replaceChildren(
        `One point per ${stepLabel(data.step_secs)} over the last ${CHART_WINDOWS.find(([w]) => w === data.window)[1]}, counted up to `,
        timeEl(data.rolled_up_to),
        " (the janitor counts each minute once it has ended).",
      );
      const { rolled_up_to: _counted, ...shown } = data;
      renderIfChanged(grid, shown, () => CHARTS.map((def) => lineChart(def, data, memory)));
    };
    return section;
  }

  // --- one queue ------------------------------------------------------------------------------

  async function queueView(ctx, root, name, params) {
    const updated = updatedNote();
    const facts = h("div");
    const failing = h("div");
    const charts = chartsPanel(ctx, {
      queue: name,
      params,
      hashOf: (w) => hashFor(`queues/${enc(name)}`, { window: w }),
    });
    root.append(
      pageHead(`Queue ${name}`, {
        extra: [updated],
        actions: [h("button", { type: "button", class: "quiet", onclick: () => ctx.refresh() }, "Refresh")],
      }),
      h(
        "p",
        { class: "subtitle" },
        "This tenant's jobs on the queue: ",
        h("a", { href: hashFor("jobs", { queue: name }) }, "list them"),
        ", or see its ",
        h("a", { href: hashFor("dlq", { queue: name }) }, "dead letters"),
        ".",
      ),
      h("section", { "aria-labelledby": "queue-now-h" }, h("h2", { id: "queue-now-h" }, "Now"), facts),
      charts,
      h(
        "section",
        { "aria-labelledby": "failing-h" },
        h("h2", { id: "failing-h" }, "Top failing tasks in the window"),
        h("p", { class: "subtitle" }, "Tasks whose jobs failed for good (each a dead letter), most first."),
        failing,
      ),
    );
    await ctx.poll(async () => {
      const [q, , top] = await Promise.all([
        ctx.api("GET", `queues/${enc(name)}`),
        charts.load(),
        ctx.api("GET", "stats/failing-tasks", { query: { queue: name, window: charts.window() } }),
      ]);
      renderIfChanged(facts, q, () =>
        h(
          "dl",
          { class: "facts" },
          fact("State", q.paused ? badge("paused") : badge("active")),
          fact("Pending", q.pending.toLocaleString()),
          fact("Scheduled", q.scheduled.toLocaleString()),
          fact("Running", q.running.toLocaleString()),
          fact("Oldest waiting", duration(q.oldest_pending_age_secs)),
          fact("Completed jobs", q.retention === "remove_completed" ? "removed as they complete" : "kept"),
        ),
      );
      renderIfChanged(failing, top, () =>
        table(
          [["Task"], ["Failures", "num"], ["Last failed"]],
          top.tasks.map((t) =>
            h(
              "tr",
              { "data-task": t.task },
              h("td", {}, h("a", { href: hashFor("jobs", { queue: name, task_name: t.task, status: "failed" }) }, t.task)),
              h("td", { class: "num" }, t.failures.toLocaleString()),
              h("td", {}, timeEl(t.last_failed_at)),
            ),
          ),
          "No job of this queue failed for good in the window.",
        ),
      );
      updated.touch();
    });
  }

  // --- queues ---------------------------------------------------------------------------------

  async function setQueuePaused(queue, paused) {
    await api("POST", `queues/${enc(queue)}/${paused ? "pause" : "resume"}`);
    return paused ? `Queue ${queue} paused.` : `Queue ${queue} resumed.`;
  }

  async function setQueueRetention(queue, retention) {
    await api("PATCH", `queues/${enc(queue)}`, { body: { retention } });
    return retention === "remove_completed"
      ? `Queue ${queue} now removes jobs as they complete.`
      : `Queue ${queue} now keeps completed jobs.`;
  }

  function removeConfirm(queue) {
    return {
      title: `Remove completed jobs of ${queue}?`,
      text:
        "From now on, each of this tenant's jobs that completes on the queue is deleted by its completion: it leaves the lists and its page answers not found. " +
        "Failed and cancelled jobs stay, and a job someone watches, or created alone and read back, stays for a short grace.",
      confirm: "Remove completed jobs",
    };
  }

  function pauseConfirm(queue) {
    return {
      title: `Pause queue ${queue}?`,
      text: "Workers stop claiming this tenant's jobs on the queue until it is resumed. Jobs already running finish.",
      confirm: "Pause queue",
    };
  }

  async function queuesView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    root.append(
      pageHead("Queues", { extra: [updated] }),
      h(
        "p",
        { class: "subtitle" },
        "The backlog of each queue this tenant has used. Pausing a queue stops claims of this tenant's jobs on it; a queue that removes completed jobs deletes each as it completes. Other tenants are not affected.",
      ),
      body,
    );
    if (may("operator")) {
      const input = h("input", { id: "pause-other", name: "queue", required: true, spellcheck: "false" });
      const form = h(
        "form",
        { class: "toolbar" },
        h("div", { class: "field" }, h("label", { for: "pause-other" }, "Pause a queue by name"), input),
        h("button", { type: "submit" }, "Pause queue"),
      );
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const queue = input.value.trim();
        if (!queue || !(await confirmAction(pauseConfirm(queue)))) return;
        try {
          toast(await setQueuePaused(queue, true));
          input.value = "";
          await ctx.refresh();
        } catch (error) {
          reportError(error);
        }
      });
      root.append(h("h2", {}, "Pause another queue"), form);
    }
    await ctx.poll(async () => {
      const { queues } = await ctx.api("GET", "queues");
      renderIfChanged(body, queues, () =>
        table(
          [
            ["Queue"],
            ["State"],
            ["Pending", "num"],
            ["Scheduled", "num"],
            ["Running", "num"],
            ["Oldest waiting", "num"],
            ["Completed jobs"],
            may("operator") ? ["Actions"] : null,
          ].filter(Boolean),
          queues.map((q) =>
            h(
              "tr",
              { "data-queue": q.queue },
              h("td", {}, h("a", { href: `#/queues/${enc(q.queue)}`, "data-fk": `q:${q.queue}` }, q.queue)),
              h("td", {}, q.paused ? badge("paused") : badge("active")),
              h("td", { class: "num" }, q.pending.toLocaleString()),
              h("td", { class: "num" }, q.scheduled.toLocaleString()),
              h("td", { class: "num" }, q.running.toLocaleString()),
              h("td", { class: "num" }, duration(q.oldest_pending_age_secs)),
              h("td", { class: "retention" }, q.retention === "remove_completed" ? "removed as they complete" : "kept"),
              may("operator")
                ? h(
                    "td",
                    { class: "actions" },
                    q.paused
                      ? actionButton("Resume queue", () => setQueuePaused(q.queue, false), {
                          cls: "small",
                          srLabel: q.queue,
                          after: () => ctx.refresh(),
                        })
                      : actionButton("Pause queue", () => setQueuePaused(q.queue, true), {
                          cls: "small danger-outline",
                          srLabel: q.queue,
                          confirm: pauseConfirm(q.queue),
                          after: () => ctx.refresh(),
                        }),
                    !may("admin")
                      ? null
                      : q.retention === "remove_completed"
                      ? actionButton("Keep completed jobs", () => setQueueRetention(q.queue, "keep"), {
                          cls: "small",
                          srLabel: q.queue,
                          after: () => ctx.refresh(),
                        })
                      : actionButton("Remove completed jobs", () => setQueueRetention(q.queue, "remove_completed"), {
                          cls: "small danger-outline",
                          srLabel: q.queue,
                          confirm: removeConfirm(q.queue),
                          after: () => ctx.refresh(),
                        }),
                  )
                : null,
            ),
          ),
          "No queues yet: a queue appears once a job is enqueued on it.",
        ),
      );
      updated.touch();
    });
  }

  // --- keyset paging shared by the lists -------------------------------------------------------

  // Cursors of the pages before the current one, for "Previous page" within this tab.
  const trail = { key: null, cursors: [] };

  function pager(view, filters, cursor, page, noun, counter) {
    const key = `${view}?${new URLSearchParams(filters)}`;
    if (trail.key !== key || !cursor) {
      trail.key = key;
      trail.cursors = [];
    }
    const controls = h("nav", { class: "pager", "aria-label": `${noun} pages` });
    if (cursor) {
      controls.append(h("a", { href: hashFor(view, filters), class: "button-link" }, "Newest"));
      if (trail.cursors.length) {
        controls.append(
          h(
            "button",
            {
              type: "button",
              onclick: () => go(hashFor(view, { ...filters, cursor: trail.cursors.pop() || "" })),
            },
            "Previous page",
          ),
        );
      }
    }
    if (page.has_more && page.next_cursor) {
      controls.append(
        h(
          "button",
          {
            type: "button",
            onclick: () => {
              trail.cursors.push(cursor || "");
              go(hashFor(view, { ...filters, cursor: page.next_cursor }));
            },
          },
          "Next page",
        ),
      );
    }
    const info = h(
      "span",
      { class: "info" },
      `${page.items.length} ${noun} on this page${cursor ? "" : ", newest first"}${page.has_more ? "; more on later pages" : ""}.`,
    );
    controls.append(info);
    if (counter) {
      controls.append(
        h(
          "button",
          {
            type: "button",
            class: "quiet small",
            title: "An exact count of every matching row: can be slow on a very large tenant.",
            onclick: async (event) => {
              event.currentTarget.disabled = true;
              try {
                info.textContent = `${(await counter()).toLocaleString()} ${noun} match in all.`;
              } catch (error) {
                reportError(error);
              }
            },
          },
          "Count all",
        ),
      );
    }
    return controls;
  }

  function filterForm(fields, onApply, clearHash) {
    const form = h("form", { class: "filters", role: "search" });
    fields.forEach((field, index) => {
      const id = `filter-${field.name}`;
      let control;
      if (field.options) {
        control = h(
          "select",
          { id, name: field.name },
          field.options.map(([value, label]) => h("option", { value, selected: value === field.value }, label)),
        );
      } else {
        control = h("input", {
          id,
          name: field.name,
          value: field.value || "",
          list: field.list,
          spellcheck: "false",
          autocomplete: "off",
          placeholder: field.placeholder,
        });
      }
      if (index === 0) control.setAttribute("data-filter-first", "");
      if (field.check) control.addEventListener("input", () => control.setCustomValidity(""));
      form.append(h("div", { class: "field" }, h("label", { for: id }, field.label), control));
    });
    form.append(
      h("button", { type: "submit", class: "primary" }, "Apply filters"),
      h("a", { href: clearHash }, "Clear filters"),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = {};
      for (const field of fields) {
        const control = form.elements[field.name];
        values[field.name] = field.check ? field.check(control.value) : control.value.trim();
        if (values[field.name] === null) {
          control.setCustomValidity(field.invalid);
          control.reportValidity();
          return;
        }
      }
      onApply(values);
    });
    return form;
  }

  function datalist(id, values) {
    return h("datalist", { id }, values.map((v) => h("option", { value: v })));
  }

  async function loadSuggestions(ctx) {
    // Filter suggestions; the views work without them.
    const [queues, tasks] = await Promise.all([
      ctx.api("GET", "queues").catch(() => ({ queues: [] })),
      ctx.api("GET", "tasks").catch(() => ({ tasks: [] })),
    ]);
    return { queues: queues.queues.map((q) => q.queue), tasks: tasks.tasks };
  }

  function bulkLimitField(id) {
    const input = h("input", { id, type: "number", min: "1", max: "1000", value: String(DEFAULT_BULK_LIMIT), inputmode: "numeric" });
    return { input, field: h("div", { class: "field" }, h("label", { for: id }, "Bulk action limit"), input) };
  }

  function describeFilter(filters) {
    const parts = Object.entries(filters)
      .filter(([, v]) => v)
      .map(([k, v]) => `${k.replace("_name", "")} = ${v}`);
    return parts.length ? parts.join(", ") : "no filter (every job of this tenant)";
  }

  // --- jobs -----------------------------------------------------------------------------------

  function jobTable(jobs, empty) {
    return table(
      [["Job"], ["Task"], ["Queue"], ["Status"], ["Retries", "num"], ["Created"], ["Finished", "hide-narrow"]],
      jobs.map((job) =>
        h(
          "tr",
          { "data-job": job.id },
          h("td", {}, idRef("job", job.id, `#/jobs/${enc(job.id)}`, { fk: `j:${job.id}` })),
          h("td", {}, job.task_name),
          h("td", {}, job.queue_name),
          h("td", {}, badge(job.status)),
          h("td", { class: "num" }, job.retry_count),
          h("td", {}, timeEl(job.created_at)),
          h("td", { class: "hide-narrow" }, timeEl(job.completed_at)),
        ),
      ),
      empty,
    );
  }

  // The job id search: any piece of an id, as shown or pasted (an ellipsis and spaces are dropped);
  // null when it cannot be part of an id.
  function idSearch(raw) {
    const text = raw.replace(/[\s…]/g, "");
    return /^[0-9a-f-]{0,36}$/i.test(text) ? text : null;
  }

  async function jobsView(ctx, root, _id, params) {
    const filters = {
      id_contains: params.get("id_contains") || "",
      status: params.get("status") || "",
      queue: params.get("queue") || "",
      task_name: params.get("task_name") || "",
    };
    const cursor = params.get("cursor") || "";
    const updated = updatedNote();
    const suggestions = await loadSuggestions(ctx);
    const listBody = h("div");
    const pagerSlot = h("div");
    root.append(
      pageHead("Jobs", { extra: [updated] }),
      filterForm(
        [
          {
            name: "id_contains",
            label: "Job id",
            value: filters.id_contains,
            placeholder: "any part of an id",
            check: idSearch,
            invalid: "A job id has hex digits and dashes only, 36 characters at most.",
          },
          {
            name: "status",
            label: "Status",
            value: filters.status,
            options: [["", "Any status"], ...JOB_STATUSES.map((s) => [s, s])],
          },
          { name: "queue", label: "Queue", value: filters.queue, list: "queue-names", placeholder: "any queue" },
          { name: "task_name", label: "Task", value: filters.task_name, list: "task-names", placeholder: "any task" },
        ],
        (values) => go(hashFor("jobs", values)),
        "#/jobs",
      ),
      datalist("queue-names", suggestions.queues),
      datalist("task-names", suggestions.tasks),
    );
    // The bulk actions take the queue, task and status filters only: not offered for a search by id.
    if (may("operator") && !filters.id_contains) root.append(jobBulkActions(ctx, filters));
    root.append(listBody, pagerSlot);
    const query = { ...filters, limit: PAGE_SIZE, cursor };
    // A search that matches nothing reads all the tenant's jobs: it refreshes at the slow pace.
    await ctx.poll(async () => {
      const page = await ctx.api("GET", "jobs", { query });
      renderIfChanged(listBody, page.jobs, () => jobTable(page.jobs, "No jobs match."));
      renderIfChanged(pagerSlot, [page.has_more, page.next_cursor, page.jobs.length], () =>
        pager("jobs", filters, cursor, { ...page, items: page.jobs }, "jobs", async () => {
          const counted = await ctx.api("GET", "jobs", { query: { ...filters, limit: 1, include_total: "true" } });
          return counted.total;
        }),
      );
      updated.touch();
    }, filters.id_contains ? SLOW_REFRESH_MS : REFRESH_MS);
  }

  function jobBulkActions(ctx, filters) {
    const { input, field } = bulkLimitField("bulk-limit");
    const limit = () => Math.max(1, Math.min(1000, Number.parseInt(input.value, 10) || DEFAULT_BULK_LIMIT));
    const bar = h("div", { class: "toolbar", role: "group", "aria-label": "Bulk actions on matching jobs" }, field);
    const body = (extra) => {
      const out = { limit: limit() };
      if (filters.queue) out.queue = filters.queue;
      if (filters.task_name) out.task_name = filters.task_name;
      return { ...out, ...extra };
    };
    if (!filters.status || ACTIVE_JOB.has(filters.status)) {
      bar.append(
        actionButton(
          "Cancel matching jobs",
          async () => {
            const result = await api("POST", "jobs/cancel", { body: body(filters.status ? { status: filters.status } : {}) });
            return `Cancelled ${result.cancelled} job${result.cancelled === 1 ? "" : "s"}.`;
          },
          {
            cls: "danger-outline",
            after: () => ctx.refresh(),
            confirm: {
              title: "Cancel matching jobs?",
              text: [
                `Cancels up to ${limit()} jobs that match: ${describeFilter(filters)}, among those pending, retrying or running.`,
                "Cancelled jobs do not run again unless retried; running ones stop at their next heartbeat.",
              ],
              confirm: "Cancel matching jobs",
            },
          },
        ),
      );
    }
    if (!filters.status || RETRYABLE_JOB.has(filters.status)) {
      bar.append(
        actionButton(
          "Retry matching jobs",
          async () => {
            const result = await api("POST", "jobs/retry", { body: body(filters.status ? { status: filters.status } : {}) });
            const n = result && typeof result.retried === "number" ? result.retried : 0;
            return `Queued ${n} job${n === 1 ? "" : "s"} to run again.`;
          },
          {
            after: () => ctx.refresh(),
            confirm: {
              title: "Retry matching jobs?",
              text: [`Runs up to ${limit()} failed or cancelled jobs that match ${describeFilter(filters)} again, in place.`],
              confirm: "Retry matching jobs",
            },
          },
        ),
      );
    }
    return bar;
  }

  function fact(label, value) {
    return h("div", {}, h("dt", {}, label), h("dd", {}, value ?? h("span", { class: "muted" }, "—")));
  }

  function liveIndicator() {
    const el = h("span", { class: "live", role: "status" }, "Connecting");
    el.set = (on, text) => {
      el.classList.toggle("on", on);
      el.textContent = text;
    };
    return el;
  }

  // Reads an SSE stream with fetch() and calls onEvent(name, data) per event; returns at its end.
  async function readEvents(ctx, path, onEvent) {
    const response = await apiFetch(path, { signal: ctx.signal, accept: "text/event-stream" });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let name = "message";
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      for (;;) {
        const match = /\r\n|\r|\n/.exec(buffer);
        if (!match) break;
        if (match[0] === "\r" && match.index === buffer.length - 1) break; // maybe "\r\n" split in two
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === "") {
          if (data.length) onEvent(name, data.join("\n"));
          name = "message";
          data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let text = colon < 0 ? "" : line.slice(colon + 1);
          if (text.startsWith(" ")) text = text.slice(1);
          if (field === "event") name = text;
          else if (field === "data") data.push(text);
        }
      }
    }
  }

  // Follows a status stream until its resource is terminal, reconnecting when the server ends it
  // early (its lifetime, a restart). `live` shows whether the page is following. Events other than
  // `status` (a job's `progress` and `log`) go to `onOther(name, value)` when given.
  async function follow(ctx, path, onData, isTerminal, live, onOther) {
    while (ctx.alive) {
      let finished = false;
      try {
        live.set(true, "Live");
        await readEvents(ctx, path, (name, data) => {
          if (name !== "status") {
            if (onOther) onOther(name, JSON.parse(data));
            return;
          }
          const value = JSON.parse(data);
          onData(value);
          if (isTerminal(value)) finished = true;
        });
      } catch (error) {
        if (error instanceof SignedOut || isAbort(error) || !ctx.alive) return;
        live.set(false, "Disconnected");
        if (error instanceof ApiError && error.status >= 400 && error.status < 500) {
          reportError(error);
          return;
        }
      }
      if (finished) {
        live.set(false, "Finished: no more updates");
        return;
      }
      if (!ctx.alive) return;
      live.set(false, "Reconnecting");
      await ctx.wait(RECONNECT_MS);
    }
  }

  // --- a job's progress, log and attempts (docs/visibility.md) --------------------------------

  const LOG_TAIL_LINES = 500;

  // The progress bar: hidden until the job's worker reports progress.
  function progressPanel() {
    const fill = h("span", { class: "progress-fill" });
    const bar = h("div", { class: "progress-bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-label": "Job progress" }, fill);
    const label = h("div", { class: "progress-label" });
    const el = h("section", { class: "progress-panel", "aria-label": "Progress", hidden: true }, label, bar);
    el.show = (progress) => {
      if (!progress) return;
      const percent = Math.max(0, Math.min(100, Number(progress.percent) || 0));
      const shown = Number.isInteger(percent) ? String(percent) : percent.toFixed(1);
      fill.style.width = `${percent}%`;
      bar.setAttribute("aria-valuenow", String(percent));
      label.replaceChildren(
        h("strong", { class: "progress-percent" }, `${shown}%`),
        progress.message ? h("span", { class: "progress-message" }, progress.message) : null,
        progress.updated_at ? h("span", { class: "muted" }, "reported ", timeEl(progress.updated_at)) : null,
      );
      el.hidden = false;
    };
    return el;
  }

  // The log tail: the job's lines as they arrive (its SSE stream's `log` events), the last
  // LOG_TAIL_LINES kept, following the bottom unless the operator has scrolled up.
  function logPanel() {
    const lines = h("ol", { class: "log-lines", tabindex: "0", "aria-label": "Log lines" });
    const note = h("p", { class: "muted log-note" }, "No log lines yet.");
    const el = h("section", { class: "block log-panel", "aria-labelledby": "log-title" }, h("h2", { id: "log-title" }, "Log"), note, lines);
    let lastSeq = 0;
    el.add = (line) => {
      if (line.seq <= lastSeq) return; // a reconnected stream sends the log again
      lastSeq = line.seq;
      const atBottom = lines.scrollTop + lines.clientHeight >= lines.scrollHeight - 4;
      lines.append(
        h(
          "li",
          { class: `log-line ${line.level ? `level-${String(line.level).toLowerCase()}` : ""}`, "data-seq": String(line.seq) },
          h("time", { datetime: line.ts, title: absTime(line.ts), class: "log-ts" }, new Date(line.ts).toLocaleTimeString()),
          line.level ? h("span", { class: "log-level" }, line.level) : null,
          h("span", { class: "log-message" }, line.message),
        ),
      );
      while (lines.childElementCount > LOG_TAIL_LINES) lines.firstElementChild.remove();
      note.textContent = `${lastSeq} line${lastSeq === 1 ? "" : "s"}${lastSeq > LOG_TAIL_LINES ? `, the last ${LOG_TAIL_LINES} shown` : ""}.`;
      if (atBottom) lines.scrollTop = lines.scrollHeight;
    };
    return el;
  }

  function attemptsTable(attempts) {
    return table(
      [["#", "num"], ["Outcome"], ["Worker"], ["Lease start"], ["Ended"], ["Duration", "num"], ["Error"]],
      attempts.map((a) =>
        h(
          "tr",
          { "data-attempt": String(a.attempt) },
          h("td", { class: "num" }, String(a.attempt)),
          h("td", {}, badge(ATTEMPT_STATUS[a.outcome] || a.outcome, a.outcome.replace(/_/g, " "))),
          h("td", {}, a.worker_id ? idRef("worker", a.worker_id, null, { full: true }) : h("span", { class: "muted" }, "—")),
          h("td", {}, timeEl(a.started_at)),
          h("td", {}, timeEl(a.ended_at)),
          h("td", { class: "num" }, a.duration_secs != null ? `${a.duration_secs.toFixed(a.duration_secs < 10 ? 2 : 0)} s` : "—"),
          h("td", { class: "error-cell" }, a.error_message || ""),
        ),
      ),
      "No attempt yet: the job has not been leased.",
    );
  }

  // An attempt's outcome drawn with the job status colour it resembles.
  const ATTEMPT_STATUS = {
    running: "running",
    completed: "completed",
    failed: "failed",
    retry: "retrying",
    lease_expired: "retrying",
    cancelled: "cancelled",
    released: "pending",
  };

  async function jobView(ctx, root, id) {
    const live = liveIndicator();
    const head = h("div");
    const facts = h("dl", { class: "facts" });
    const blocks = h("div");
    const progress = progressPanel();
    const attempts = h("div");
    const log = logPanel();
    root.append(
      head,
      h("section", { "aria-label": "Job facts" }, facts),
      progress,
      blocks,
      h("section", { class: "block", "aria-labelledby": "attempts-title" }, h("h2", { id: "attempts-title" }, "Attempts"), attempts),
      log,
    );
    let following = false;
    let current = null;

    const loadAttempts = async () => {
      const answer = await ctx.api("GET", `jobs/${enc(id)}/attempts`);
      renderIfChanged(attempts, answer.attempts, () => attemptsTable(answer.attempts));
    };
    const onOther = (name, value) => {
      if (name === "progress") progress.show(value);
      else if (name === "log") log.add(value);
    };

    const startFollowing = () => {
      if (following) return;
      following = true;
      follow(ctx, `jobs/${enc(id)}/events`, render, (job) => TERMINAL_JOB.has(job.status), live, onOther).finally(() => {
        following = false;
      });
    };

    function actions(job) {
      if (!may("operator")) return [];
      const out = [];
      if (ACTIVE_JOB.has(job.status)) {
        out.push(
          actionButton(
            "Cancel job",
            async () => {
              await api("POST", `jobs/${enc(id)}/cancel`);
              return "Job cancelled.";
            },
            {
              cls: "danger",
              confirm: {
                title: "Cancel this job?",
                text: [
                  `${job.task_name} on queue ${job.queue_name} (${job.status}) will not run again unless retried.`,
                  job.status === "running" ? "Its worker is told at its next heartbeat." : "",
                ].filter(Boolean),
                confirm: "Cancel job",
              },
              after: async () => render(await api("GET", `jobs/${enc(id)}`)),
            },
          ),
        );
      }
      if (RETRYABLE_JOB.has(job.status)) {
        out.push(
          actionButton(
            "Retry job",
            async () => {
              await api("POST", `jobs/${enc(id)}/retry`);
              return "Job queued to run again.";
            },
            {
              cls: "primary",
              after: async () => {
                render(await api("GET", `jobs/${enc(id)}`));
                startFollowing();
              },
            },
          ),
        );
      }
      return out;
    }

    function render(job) {
      if (!ctx.alive) return;
      const statusChanged = !current || current.status !== job.status;
      current = job;
      const config = job.config || {};
      progress.show(job.progress); // (a stream's status event leaves it out: its own event brings it)
      if (statusChanged) {
        loadAttempts().catch((error) => {
          if (!(error instanceof SignedOut) && !isAbort(error) && ctx.alive) reportError(error);
        });
        head.replaceChildren(
          pageHead(["Job ", h("span", { class: "mono" }, job.id)], {
            badges: [copyButton("job", job.id), badge(job.status)],
            extra: [live],
            actions: actions(job),
          }),
        );
      }
      renderIfChanged(facts, job, () => [
        fact("Status", badge(job.status)),
        fact("Task", h("a", { href: hashFor("jobs", { task_name: job.task_name }) }, job.task_name)),
        fact("Queue", h("a", { href: hashFor("jobs", { queue: job.queue_name }) }, job.queue_name)),
        fact("Retries", `${job.retry_count}${config.max_retries != null ? ` of ${config.max_retries}` : ""}`),
        fact("Deliveries", String(job.delivery_count)),
        fact("Priority", config.priority != null ? String(config.priority) : "0"),
        fact("Created", timeEl(job.created_at)),
        fact("Scheduled for", timeEl(job.scheduled_at)),
        fact("Started", timeEl(job.started_at)),
        fact("Finished", timeEl(job.completed_at)),
        job.next_retry_at ? fact("Next retry", timeEl(job.next_retry_at)) : null,
        job.workflow_id
          ? fact("Workflow", [
              idRef("workflow", job.workflow_id, `#/workflows/${enc(job.workflow_id)}`),
              job.workflow_step_id ? ` step ${job.workflow_step_id}` : "",
            ])
          : null,
        job.idempotency_key ? fact("Idempotency key", h("span", { class: "mono" }, job.idempotency_key)) : null,
      ]);
      renderIfChanged(blocks, job, () => [
        job.error_message
          ? h("section", { class: "block" }, h("h2", {}, "Error"), h("pre", { class: "text error", tabindex: "0" }, job.error_message))
          : null,
        h(
          "div",
          { class: "blocks" },
          h("section", { class: "block" }, h("h2", {}, "Payload"), pretty(job.payload)),
          h("section", { class: "block" }, h("h2", {}, "Result"), job.result !== undefined && job.result !== null ? pretty(job.result) : h("p", { class: "muted" }, "No result yet.")),
          h("section", { class: "block" }, h("h2", {}, "Config"), pretty(job.config)),
          h("section", { class: "block" }, h("h2", {}, "Metadata"), pretty(job.metadata)),
        ),
      ]);
    }

    render(await ctx.api("GET", `jobs/${enc(id)}`));
    ctx.refresh = async () => render(await ctx.api("GET", `jobs/${enc(id)}`));
    startFollowing();
  }

  // --- workflows ------------------------------------------------------------------------------

  function workflowTable(workflows, empty) {
    return table(
      [["Workflow"], ["Name"], ["Status"], ["Steps", "num"], ["Created"], ["Finished", "hide-narrow"]],
      workflows.map((wf) =>
        h(
          "tr",
          { "data-workflow": wf.id },
          h("td", {}, idRef("workflow", wf.id, `#/workflows/${enc(wf.id)}`, { fk: `w:${wf.id}` })),
          h("td", {}, wf.name),
          h("td", {}, badge(wf.status)),
          h("td", { class: "num" }, (wf.steps || []).length),
          h("td", {}, timeEl(wf.created_at)),
          h("td", { class: "hide-narrow" }, timeEl(wf.completed_at)),
        ),
      ),
      empty,
    );
  }

  async function workflowsView(ctx, root, _id, params) {
    const filters = { status: params.get("status") || "" };
    const cursor = params.get("cursor") || "";
    const updated = updatedNote();
    const listBody = h("div");
    const pagerSlot = h("div");
    root.append(
      pageHead("Workflows", { extra: [updated] }),
      filterForm(
        [
          {
            name: "status",
            label: "Status",
            value: filters.status,
            options: [["", "Any status"], ...WORKFLOW_STATUSES.map((s) => [s, s.replace(/_/g, " ")])],
          },
        ],
        (values) => go(hashFor("workflows", values)),
        "#/workflows",
      ),
      listBody,
      pagerSlot,
    );
    const query = { ...filters, limit: PAGE_SIZE, cursor };
    await ctx.poll(async () => {
      const page = await ctx.api("GET", "workflows", { query });
      renderIfChanged(listBody, page.workflows, () => workflowTable(page.workflows, "No workflows match."));
      renderIfChanged(pagerSlot, [page.has_more, page.next_cursor, page.workflows.length], () =>
        pager("workflows", filters, cursor, { ...page, items: page.workflows }, "workflows", async () => {
          const counted = await ctx.api("GET", "workflows", { query: { ...filters, limit: 1, include_total: "true" } });
          return counted.total;
        }),
      );
      updated.touch();
    });
  }

  // Layered layout of a DAG, left to right: each step in the column of its longest dependency
  // chain; an edge that spans columns passes through placeholder points so that it bends around
  // the steps between; a few sweeps order each column by the average position of its neighbours
  // to reduce crossings.
  function layoutDag(steps) {
    const NODE_W = 184;
    const NODE_H = 50;
    const GAP_X = 64;
    const GAP_Y = 18;
    const DUMMY_H = 8;
    const byName = new Map(steps.map((step, index) => [step.name, { step, index }]));
    const column = new Map();
    const columnOf = (name, seen = new Set()) => {
      if (column.has(name)) return column.get(name);
      if (seen.has(name)) throw new Error(`dependency cycle at ${name}`);
      seen.add(name);
      const deps = (byName.get(name).step.depends_on || []).filter((d) => byName.has(d));
      const value = deps.length ? 1 + Math.max(...deps.map((d) => columnOf(d, seen))) : 0;
      column.set(name, value);
      return value;
    };
    for (const step of steps) columnOf(step.name);

    const nodes = new Map(); // id -> {id, col, dummy, preds: [], succs: []}
    const addNode = (id, col, dummy) => {
      const node = { id, col, dummy, preds: [], succs: [], order: 0 };
      nodes.set(id, node);
      return node;
    };
    for (const step of steps) addNode(`s:${step.name}`, column.get(step.name), false);
    const edges = [];
    let dummies = 0;
    for (const step of steps) {
      for (const dep of step.depends_on || []) {
        if (!byName.has(dep)) continue;
        const chain = [`s:${dep}`];
        for (let c = column.get(dep) + 1; c < column.get(step.name); c += 1) {
          const dummy = addNode(`d:${(dummies += 1)}`, c, true);
          chain.push(dummy.id);
        }
        chain.push(`s:${step.name}`);
        for (let i = 0; i + 1 < chain.length; i += 1) {
          nodes.get(chain[i]).succs.push(chain[i + 1]);
          nodes.get(chain[i + 1]).preds.push(chain[i]);
        }
        edges.push({ from: dep, to: step.name, chain });
      }
    }
    const columns = [];
    for (const node of nodes.values()) (columns[node.col] ||= []).push(node);
    const renumber = (col) => col.forEach((node, i) => (node.order = i));
    columns.forEach(renumber);
    const sweep = (col, neighbours) => {
      const keyed = col.map((node) => {
        const around = node[neighbours].map((id) => nodes.get(id).order);
        return { node, key: around.length ? around.reduce((a, b) => a + b, 0) / around.length : node.order };
      });
      keyed.sort((a, b) => a.key - b.key || a.node.order - b.node.order);
      const sorted = keyed.map((k) => k.node);
      renumber(sorted);
      return sorted;
    };
    for (let round = 0; round < 6; round += 1) {
      if (round % 2 === 0) for (let c = 1; c < columns.length; c += 1) columns[c] = sweep(columns[c], "preds");
      else for (let c = columns.length - 2; c >= 0; c -= 1) columns[c] = sweep(columns[c], "succs");
    }
    const heightOf = (col) => col.reduce((sum, n) => sum + (n.dummy ? DUMMY_H : NODE_H), 0) + GAP_Y * (col.length - 1);
    const height = Math.max(NODE_H, ...columns.map(heightOf));
    columns.forEach((col, c) => {
      let y = (height - heightOf(col)) / 2;
      for (const node of col) {
        node.x = c * (NODE_W + GAP_X);
        node.h = node.dummy ? DUMMY_H : NODE_H;
        node.y = y;
        y += node.h + GAP_Y;
      }
    });
    // An edge leaves its step on the right, crosses each column it spans straight through its
    // placeholder, and enters the next step on the left; it bends only between columns.
    const points = (chain) =>
      chain.flatMap((id, i) => {
        const n = nodes.get(id);
        const cy = n.y + n.h / 2;
        if (n.dummy) return [[n.x, cy], [n.x + NODE_W, cy]];
        return [i === 0 ? [n.x + NODE_W, cy] : [n.x, cy]];
      });
    return {
      width: columns.length * (NODE_W + GAP_X) - GAP_X,
      height,
      nodeW: NODE_W,
      nodeH: NODE_H,
      node: (name) => nodes.get(`s:${name}`),
      edges: edges.map((e) => ({ ...e, points: points(e.chain) })),
    };
  }

  function edgePath(points) {
    let d = `M${points[0][0]},${points[0][1]}`;
    for (let i = 1; i < points.length; i += 1) {
      const [x0, y0] = points[i - 1];
      const [x1, y1] = points[i];
      const dx = (x1 - x0) / 2;
      d += ` C${x0 + dx},${y0} ${x1 - dx},${y1} ${x1},${y1}`;
    }
    return d;
  }

  function clip(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function stateLabel(state) {
    let text = (state.status || "pending").replace(/_/g, " ");
    if (state.fan_out) text += ` · ${state.fan_out.completed + state.fan_out.failed}/${state.fan_out.total}`;
    return text;
  }

  // The workflow's DAG as SVG; returns {element, update(states)} to recolour it live.
  function workflowGraph(steps) {
    const layout = layoutDag(steps);
    const pad = 8;
    const root = svg("svg", {
      width: layout.width + pad * 2,
      height: layout.height + pad * 2,
      viewBox: `${-pad} ${-pad} ${layout.width + pad * 2} ${layout.height + pad * 2}`,
      role: "group",
      "aria-label": `Workflow graph: ${steps.length} step${steps.length === 1 ? "" : "s"}`,
    });
    const marker = svg(
      "marker",
      { id: "qf-arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }),
    );
    root.append(svg("defs", {}, marker));
    for (const edge of layout.edges) {
      root.append(
        svg("path", { class: "edge", d: edgePath(edge.points), "marker-end": "url(#qf-arrow)", "data-edge": `${edge.from}->${edge.to}` }),
      );
    }
    const slots = new Map();
    for (const step of steps) {
      const node = layout.node(step.name);
      const title = svg("title");
      const name = svg("text", { x: 12, y: 21 }, clip(step.name, 22));
      const status = svg("text", { x: 12, y: 38, class: "state" }, "pending");
      const group = svg(
        "g",
        { transform: `translate(${node.x},${node.y})` },
        title,
        svg("rect", { width: layout.nodeW, height: layout.nodeH, rx: 8, ry: 8 }),
        svg("rect", { class: "bg", width: layout.nodeW, height: layout.nodeH, rx: 8, ry: 8 }),
        name,
        status,
      );
      const holder = svg("g", { class: "node st-pending", "data-step": step.name }, group);
      root.append(holder);
      slots.set(step.name, { holder, group, title, status, link: null });
    }
    const update = (states) => {
      for (const st of states) {
        const slot = slots.get(st.name);
        if (!slot) continue;
        const target = st.child_workflow_id ? `#/workflows/${enc(st.child_workflow_id)}` : st.job_id ? `#/jobs/${enc(st.job_id)}` : null;
        const label = stateLabel(st);
        slot.status.textContent = label;
        slot.title.textContent = `${st.name}: ${label}${target ? " (open)" : ""}`;
        // A step with a job (or a child workflow) is a link to it; the others are plain groups.
        let holder = slot.holder;
        if (target && holder.tagName !== "a") {
          holder = svg("a", { href: target, "aria-label": `Step ${st.name}: ${label}` });
          slot.holder.replaceWith(holder);
          holder.append(slot.group);
          slot.holder = holder;
        } else if (target) {
          holder.setAttribute("href", target);
          holder.setAttribute("aria-label", `Step ${st.name}: ${label}`);
        }
        holder.setAttribute("class", `node st-${st.status}`);
        holder.setAttribute("data-step", st.name);
        holder.setAttribute("data-status", st.status);
      }
    };
    return { element: root, update };
  }

  function stepsTable(states) {
    return table(
      [["Step"], ["Status"], ["Job"], ["Started", "hide-narrow"], ["Finished"], ["Error"]],
      states.map((st) =>
        h(
          "tr",
          { "data-step": st.name },
          h("td", {}, st.name),
          h("td", {}, badge(st.status, stateLabel(st))),
          h(
            "td",
            {},
            st.job_id ? idRef("job", st.job_id, `#/jobs/${enc(st.job_id)}`, { fk: `s:${st.name}` }) : null,
            st.child_workflow_id ? idRef("workflow", st.child_workflow_id, `#/workflows/${enc(st.child_workflow_id)}`, { label: "child workflow " }) : null,
            // A sleep or a wait runs no job: what it waits for, and until when.
            st.event_key ? h("span", { "data-waiting": "" }, "waiting for ", h("code", {}, st.event_key)) : null,
            st.wake_at ? h("span", { "data-wakes": "" }, st.event_key ? " · times out " : "sleeping · wakes ", timeEl(st.wake_at)) : null,
          ),
          h("td", { class: "hide-narrow" }, timeEl(st.started_at)),
          h("td", {}, timeEl(st.completed_at)),
          h("td", { class: "error-cell" }, st.error || ""),
        ),
      ),
      "This workflow has no steps.",
    );
  }

  async function workflowView(ctx, root, id) {
    const live = liveIndicator();
    const path = `workflows/${enc(id)}`;
    const [wf, steps] = await Promise.all([ctx.api("GET", path), ctx.api("GET", `${path}/steps`)]);
    const head = h("div");
    const facts = h("dl", { class: "facts" });
    const errorSlot = h("div");
    const table_ = h("div");
    const graphPanel = h("div", { class: "graph-wrap", id: "graph-panel" });
    const mermaidPanel = h("div", { id: "mermaid-panel", hidden: true });
    let graph = null;
    try {
      graph = workflowGraph(wf.steps || []);
      graphPanel.append(graph.element);
    } catch (error) {
      graphPanel.append(errorPanel(new Error(`The graph could not be drawn (${error.message}); the Mermaid text follows.`)));
    }
    const graphTab = h("button", { type: "button", "aria-pressed": "true", "aria-controls": "graph-panel" }, "Graph");
    const mermaidTab = h("button", { type: "button", "aria-pressed": "false", "aria-controls": "mermaid-panel" }, "Mermaid text");
    const showTab = async (mermaid) => {
      graphTab.setAttribute("aria-pressed", String(!mermaid));
      mermaidTab.setAttribute("aria-pressed", String(mermaid));
      graphPanel.hidden = mermaid;
      mermaidPanel.hidden = !mermaid;
      if (mermaid && !mermaidPanel.childElementCount) {
        try {
          const diagram = await ctx.api("GET", `${path}/diagram`);
          mermaidPanel.append(
            h("p", { class: "muted" }, `The DAG as ${diagram.format} text (GET /api/v1/workflows/{id}/diagram): paste it into any Mermaid renderer.`),
            h("pre", { class: "text", tabindex: "0", id: "mermaid-text" }, diagram.diagram),
          );
        } catch (error) {
          reportError(error);
        }
      }
    };
    graphTab.addEventListener("click", () => showTab(false));
    mermaidTab.addEventListener("click", () => showTab(true));

    let current = null;
    const actions = (w) => {
      if (!may("operator")) return [];
      const out = [];
      const reload = async () => renderWorkflow(await api("GET", path));
      if (!TERMINAL_WORKFLOW.has(w.status)) {
        out.push(
          actionButton(
            "Cancel workflow",
            async () => {
              await api("POST", `${path}/cancel`);
              return "Workflow cancelled.";
            },
            {
              cls: "danger",
              after: reload,
              confirm: {
                title: `Cancel workflow ${w.name}?`,
                text: "Every unfinished step is cancelled, running step jobs included (their workers are told at the next heartbeat).",
                confirm: "Cancel workflow",
              },
            },
          ),
        );
      }
      if (RETRYABLE_WORKFLOW.has(w.status)) {
        out.push(
          actionButton(
            "Retry workflow",
            async () => {
              await api("POST", `${path}/retry`);
              return "Workflow retrying: the steps that did not complete run again.";
            },
            {
              cls: "primary",
              after: async () => {
                await reload();
                startFollowing();
              },
            },
          ),
        );
      }
      return out;
    };

    function renderWorkflow(w) {
      if (!ctx.alive) return;
      if (!current || current.status !== w.status) {
        head.replaceChildren(
          pageHead(["Workflow ", w.name], { badges: [badge(w.status)], extra: [live], actions: actions(w) }),
          h("p", { class: "subtitle" }, idRef("workflow", w.id, null, { full: true })),
        );
      }
      current = w;
      renderIfChanged(facts, w, () => [
        fact("Status", badge(w.status)),
        fact("Steps", String((w.steps || []).length)),
        fact("Created", timeEl(w.created_at)),
        fact("Started", timeEl(w.started_at)),
        fact("Finished", timeEl(w.completed_at)),
        fact("Retries", String(w.retry_count ?? 0)),
        w.deadline_at ? fact("Deadline", timeEl(w.deadline_at)) : null,
        w.parent_workflow_id
          ? fact("Parent workflow", [idRef("workflow", w.parent_workflow_id, `#/workflows/${enc(w.parent_workflow_id)}`), w.parent_step_name ? ` step ${w.parent_step_name}` : ""])
          : null,
      ]);
      renderIfChanged(errorSlot, w.error_message || "", () =>
        w.error_message ? [h("h2", {}, "Error"), h("pre", { class: "text error", tabindex: "0" }, w.error_message)] : [],
      );
    }

    function renderSteps(states) {
      if (!ctx.alive) return;
      graph?.update(states);
      renderIfChanged(table_, states, () => stepsTable(states));
    }

    const contextSlot = h("div");
    root.append(
      head,
      h("section", { "aria-label": "Workflow facts" }, facts),
      errorSlot,
      h("h2", { id: "graph-h" }, "Steps"),
      h("div", { class: "tabs", role: "group", "aria-labelledby": "graph-h" }, graphTab, mermaidTab),
      graphPanel,
      mermaidPanel,
      h("div", { class: "legend" }, ["pending", "running", "completed", "failed", "skipped", "cancelled"].map((s) => h("span", {}, h("span", { class: `swatch st-${s}` }), s))),
      table_,
      contextSlot,
    );
    renderWorkflow(wf);
    renderSteps(steps.steps);
    contextSlot.append(
      h(
        "div",
        { class: "blocks" },
        h("section", { class: "block" }, h("h2", {}, "Context"), pretty(wf.context)),
        h("section", { class: "block" }, h("h2", {}, "Metadata"), pretty(wf.metadata)),
      ),
    );
    if (!graph) await showTab(true);

    let following = false;
    const startFollowing = () => {
      if (following) return;
      following = true;
      follow(
        ctx,
        `${path}/events`,
        async (event) => {
          renderSteps(event.steps);
          if (!current || current.status !== event.status || (current.error_message || "") !== (event.error_message || "")) {
            try {
              renderWorkflow(await api("GET", path, { signal: ctx.signal }));
            } catch (error) {
              reportError(error);
            }
          }
        },
        (event) => TERMINAL_WORKFLOW.has(event.status),
        live,
      ).finally(() => {
        following = false;
      });
    };
    ctx.refresh = async () => {
      const [w, s] = await Promise.all([ctx.api("GET", path), ctx.api("GET", `${path}/steps`)]);
      renderWorkflow(w);
      renderSteps(s.steps);
    };
    startFollowing();
  }

  // --- dead letters ---------------------------------------------------------------------------

  async function replayOne(entryId) {
    const result = await api("POST", `dlq/${enc(entryId)}/replay`);
    return result.job_id;
  }

  async function deadLettersView(ctx, root, _id, params) {
    const filters = {
      queue: params.get("queue") || "",
      task_name: params.get("task_name") || "",
      replayed: params.get("replayed") || "",
    };
    const cursor = params.get("cursor") || "";
    const updated = updatedNote();
    const suggestions = await loadSuggestions(ctx);
    const listBody = h("div");
    const pagerSlot = h("div");
    root.append(
      pageHead("Dead letters", { extra: [updated] }),
      h("p", { class: "subtitle" }, "Jobs that failed for good. Replaying one enqueues a fresh copy of it (a new job); each dead letter replays once."),
      filterForm(
        [
          { name: "queue", label: "Queue", value: filters.queue, list: "queue-names", placeholder: "any queue" },
          { name: "task_name", label: "Task", value: filters.task_name, list: "task-names", placeholder: "any task" },
          {
            name: "replayed",
            label: "Replayed",
            value: filters.replayed,
            options: [
              ["", "Any"],
              ["false", "Not replayed"],
              ["true", "Replayed"],
            ],
          },
        ],
        (values) => go(hashFor("dlq", values)),
        "#/dlq",
      ),
      datalist("queue-names", suggestions.queues),
      datalist("task-names", suggestions.tasks),
    );
    if (may("operator")) {
      const { input, field } = bulkLimitField("replay-limit");
      const limit = () => Math.max(1, Math.min(1000, Number.parseInt(input.value, 10) || DEFAULT_BULK_LIMIT));
      const scope = describeFilter({ queue: filters.queue, task_name: filters.task_name }).replace("every job", "every dead letter");
      root.append(
        h(
          "div",
          { class: "toolbar", role: "group", "aria-label": "Bulk replay" },
          field,
          actionButton(
            "Replay matching dead letters",
            async () => {
              const body = { limit: limit() };
              if (filters.queue) body.queue = filters.queue;
              if (filters.task_name) body.task_name = filters.task_name;
              const result = await api("POST", "dlq/replay", { body });
              const failed = result.results.filter((r) => r.error).length;
              return `Replayed ${result.replayed} dead letter${result.replayed === 1 ? "" : "s"}${failed ? `; ${failed} could not be replayed` : ""}.`;
            },
            {
              after: () => ctx.refresh(),
              confirm: {
                title: "Replay matching dead letters?",
                text: [`Enqueues a new job for each of up to ${limit()} dead letters not replayed yet that match: ${scope}.`],
                confirm: "Replay matching dead letters",
              },
            },
          ),
        ),
      );
    }
    root.append(listBody, pagerSlot);
    const query = { ...filters, limit: PAGE_SIZE, cursor };
    await ctx.poll(async () => {
      const page = await ctx.api("GET", "dlq", { query });
      renderIfChanged(listBody, page.dead_letters, () =>
        table(
          [["Entry"], ["Job"], ["Task"], ["Queue"], ["Reason", "hide-narrow"], ["Error"], ["Died"], ["Replay"]],
          page.dead_letters.map((dl) =>
            h(
              "tr",
              { "data-dead-letter": dl.id },
              h("td", {}, h("a", { href: `#/dlq/${dl.id}`, class: "mono", "data-fk": `d:${dl.id}` }, `#${dl.id}`)),
              h("td", { "data-col": "job" }, idRef("job", dl.job_id, `#/jobs/${enc(dl.job_id)}`, { fk: `dj:${dl.id}` })),
              h("td", {}, dl.task_name || "—"),
              h("td", {}, dl.queue_name || "—"),
              h("td", { class: "hide-narrow" }, dl.reason),
              h("td", { class: "error-cell" }, clip(dl.error_message || "", 160)),
              h("td", {}, timeEl(dl.created_at)),
              h(
                "td",
                {},
                dl.replayed_at
                  ? [idRef("job", dl.replay_job_id, `#/jobs/${enc(dl.replay_job_id)}`, { label: "job " }), " ", timeEl(dl.replayed_at)]
                  : may("operator")
                    ? actionButton("Replay", async () => `Replayed as job ${shortId(await replayOne(dl.id))}.`, {
                        cls: "small",
                        srLabel: `dead letter ${dl.id}`,
                        after: () => ctx.refresh(),
                      })
                    : h("span", { class: "muted" }, "not replayed"),
              ),
            ),
          ),
          "No dead letters match.",
        ),
      );
      renderIfChanged(pagerSlot, [page.has_more, page.next_cursor, page.dead_letters.length], () =>
        pager("dlq", filters, cursor, { ...page, items: page.dead_letters }, "dead letters", async () => {
          const counted = await ctx.api("GET", "dlq", { query: { ...filters, limit: 1, include_total: "true" } });
          return counted.total;
        }),
      );
      updated.touch();
    });
  }

  async function deadLetterView(ctx, root, id) {
    const slot = h("div");
    root.append(slot);
    const render = async () => {
      const dl = await ctx.api("GET", `dlq/${enc(id)}`);
      let job = null;
      try {
        job = await ctx.api("GET", `jobs/${enc(dl.job_id)}`);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 404)) throw error;
      }
      const actions = [];
      if (may("operator") && !dl.replayed_at) {
        actions.push(
          actionButton("Replay dead letter", async () => `Replayed as job ${shortId(await replayOne(dl.id))}.`, {
            cls: "primary",
            after: render,
          }),
        );
      }
      slot.replaceChildren(
        pageHead(`Dead letter #${dl.id}`, { badges: [dl.replayed_at ? badge("completed", "replayed") : badge("failed", "dead")], actions }),
        h(
          "dl",
          { class: "facts" },
          fact("Job", idRef("job", dl.job_id, `#/jobs/${enc(dl.job_id)}`, { full: true })),
          fact("Task", dl.task_name),
          fact("Queue", dl.queue_name),
          fact("Reason", dl.reason),
          fact("Died", timeEl(dl.created_at)),
          fact("Replayed", timeEl(dl.replayed_at)),
          dl.replay_job_id ? fact("Replayed as", idRef("job", dl.replay_job_id, `#/jobs/${enc(dl.replay_job_id)}`, { full: true })) : null,
          job ? fact("Retries used", String(job.retry_count)) : null,
        ),
        h("h2", {}, "Error"),
        h("pre", { class: "text error", tabindex: "0" }, dl.error_message || "(no message)"),
        job
          ? h("div", { class: "blocks" }, h("section", { class: "block" }, h("h2", {}, "Payload"), pretty(job.payload)), h("section", { class: "block" }, h("h2", {}, "Config"), pretty(job.config)))
          : h("p", { class: "muted" }, "The original job is gone (retention); it can no longer be replayed."),
      );
    };
    ctx.refresh = render;
    await render();
  }

  // --- cron -----------------------------------------------------------------------------------

  async function cronView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    const more = h("div");
    root.append(
      pageHead("Cron schedules", { extra: [updated] }),
      h("p", { class: "subtitle" }, "Each schedule enqueues a job at every occurrence of its expression (UTC). A paused schedule skips the occurrences it misses."),
    );
    if (may("admin")) root.append(cronCreateForm(ctx));
    root.append(body, more);
    let pages = 1;
    const load = async () => {
      const crons = [];
      let cursor = "";
      let page;
      for (let i = 0; i < pages; i += 1) {
        page = await ctx.api("GET", "cron", { query: { limit: 100, cursor } });
        crons.push(...page.crons);
        if (!page.has_more) break;
        cursor = page.next_cursor;
      }
      renderIfChanged(body, crons, () => cronTable(ctx, crons));
      renderIfChanged(more, [page.has_more], () =>
        page.has_more
          ? h("div", { class: "pager" }, h("button", { type: "button", onclick: () => { pages += 1; ctx.refresh(); } }, "Show more schedules"))
          : null,
      );
      updated.touch();
    };
    await ctx.poll(load, REFRESH_MS);
  }

  function cronTable(ctx, crons) {
    return table(
      [["Name"], ["Expression"], ["Task"], ["Queue", "hide-narrow"], ["State"], ["Next firing"], ["Last enqueued", "hide-narrow"], may("operator") ? ["Actions"] : null].filter(Boolean),
      crons.map((c) =>
        h(
          "tr",
          { "data-cron": c.name },
          h("td", {}, c.name),
          h("td", {}, h("code", {}, c.cron_expr)),
          h("td", {}, c.workflow ? h("span", { title: "starts this workflow at each occurrence" }, `workflow ${c.workflow.name}`) : h("a", { href: hashFor("jobs", { task_name: c.task_name }) }, c.task_name)),
          h("td", { class: "hide-narrow" }, c.queue_name || h("span", { class: "muted" }, "default")),
          h("td", {}, c.enabled ? badge("active") : badge("paused")),
          h(
            "td",
            {},
            c.enabled ? timeEl(c.next_run_at) : h("span", { class: "muted", title: `Would be ${absTime(c.next_run_at)}` }, "paused"),
            // A schedule read in a time zone: its next firing on that zone's clock, as the server says.
            c.timezone && c.next_run_local ? h("div", { class: "muted", "data-local": "" }, `${c.next_run_local.slice(0, 16).replace("T", " ")} ${c.timezone}`) : null,
          ),
          h("td", { class: "hide-narrow" }, timeEl(c.last_enqueued_at)),
          may("operator")
            ? h(
                "td",
                { class: "actions" },
                c.enabled
                  ? actionButton(
                      "Pause schedule",
                      async () => {
                        await api("POST", `cron/${enc(c.id)}/pause`);
                        return `Schedule ${c.name} paused.`;
                      },
                      { cls: "small", srLabel: c.name, after: () => ctx.refresh() },
                    )
                  : actionButton(
                      "Resume schedule",
                      async () => {
                        await api("POST", `cron/${enc(c.id)}/resume`);
                        return `Schedule ${c.name} resumed.`;
                      },
                      { cls: "small", srLabel: c.name, after: () => ctx.refresh() },
                    ),
                !may("admin") ? null : actionButton(
                  "Delete schedule",
                  async () => {
                    await api("DELETE", `cron/${enc(c.id)}`);
                    return `Schedule ${c.name} deleted.`;
                  },
                  {
                    cls: "small danger-outline",
                    srLabel: c.name,
                    after: () => ctx.refresh(),
                    confirm: {
                      title: `Delete schedule ${c.name}?`,
                      text: "It stops firing for good. Jobs it already enqueued are not touched.",
                      confirm: "Delete schedule",
                    },
                  },
                ),
              )
            : null,
        ),
      ),
      "No cron schedules yet.",
    );
  }

  // One labelled input (or textarea) of a create form; its id is `${prefix}-${name}`.
  function formField(prefix, name, label, attrs = {}) {
    const id = `${prefix}-${name}`;
    return h("div", { class: `field ${attrs.wide ? "wide" : ""}` }, h("label", { for: id }, label), attrs.textarea ? h("textarea", { id, name, spellcheck: "false", placeholder: attrs.placeholder }) : h("input", { id, name, required: attrs.required, spellcheck: "false", autocomplete: "off", placeholder: attrs.placeholder, list: attrs.list }));
  }

  // A create form's submit: `send(value)` makes the call and returns the toast's text; what it
  // throws (the server's message, or a check of its own) shows under the form.
  function onCreate(ctx, form, message, send) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      message.textContent = "";
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        toast(await send((name) => form.elements[name].value.trim()));
        form.reset();
        await ctx.refresh();
      } catch (error) {
        if (!(error instanceof SignedOut)) message.textContent = error.message;
      } finally {
        button.disabled = false;
      }
    });
  }

  function cronCreateForm(ctx) {
    const field = (name, label, attrs) => formField("cron", name, label, attrs);
    const message = h("p", { role: "alert", class: "muted" });
    const form = h(
      "form",
      {},
      h(
        "div",
        { class: "form-grid" },
        field("name", "Name", { required: true, placeholder: "nightly-report" }),
        field("cron_expr", "Cron expression", { required: true, placeholder: "0 3 * * *" }),
        field("task_name", "Task", { required: true, placeholder: "echo", list: "cron-task-names" }),
        field("queue", "Queue (optional)", { placeholder: "default" }),
        field("timezone", "Time zone (optional)", { placeholder: "UTC, or e.g. Europe/Berlin" }),
        field("payload", "Payload (JSON object, optional)", { textarea: true, wide: true, placeholder: '{"report": "daily"}' }),
      ),
      h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Create schedule")),
      message,
    );
    ctx.api("GET", "tasks").then(
      (t) => form.append(datalist("cron-task-names", t.tasks)),
      () => {},
    );
    onCreate(ctx, form, message, async (value) => {
      const body = { name: value("name"), cron_expr: value("cron_expr"), task_name: value("task_name") };
      if (value("queue")) body.queue = value("queue");
      if (value("timezone")) body.timezone = value("timezone");
      if (value("payload")) {
        try {
          body.payload = JSON.parse(value("payload"));
        } catch (error) {
          throw new Error(`The payload is not valid JSON: ${error.message}`);
        }
      }
      await api("POST", "cron", { body });
      return `Schedule ${body.name} created.`;
    });
    return h("details", { class: "create panel" }, h("summary", {}, "New schedule"), form);
  }

  // --- limits ---------------------------------------------------------------------------------

  async function limitsView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    root.append(
      pageHead("Limits", { extra: [updated] }),
      h(
        "p",
        { class: "subtitle" },
        "Per-key policies: a job naming a key in its config's limits starts only while the key has a free slot and rate room. A key ending in * covers every key with that prefix that has no policy of its own.",
      ),
    );
    if (may("admin")) root.append(limitForm(ctx));
    root.append(body);
    await ctx.poll(async () => {
      const found = (await ctx.api("GET", "limits")).limits;
      renderIfChanged(body, found, () => limitsTable(ctx, found));
      updated.touch();
    }, REFRESH_MS);
  }

  function limitsTable(ctx, limits) {
    const none = h("span", { class: "muted" }, "none");
    return table(
      [["Key"], ["Concurrency"], ["Running"], ["Rate"], ["Rate room now"], ["Updated", "hide-narrow"], may("admin") ? ["Actions"] : null].filter(Boolean),
      limits.map((p) =>
        h(
          "tr",
          { "data-limit": p.key },
          h("td", {}, h("code", {}, p.key)),
          h("td", { "data-col": "concurrency" }, p.concurrency == null ? none : String(p.concurrency)),
          h("td", { "data-col": "running" }, String(p.running)),
          h("td", { "data-col": "rate" }, p.rate ? `${p.rate.count} per ${p.rate.per_secs} s` : none),
          h("td", { "data-col": "rate_available" }, p.rate_available == null ? h("span", { class: "muted" }, "-") : String(p.rate_available)),
          h("td", { class: "hide-narrow" }, timeEl(p.updated_at)),
          may("admin")
            ? h(
                "td",
                { class: "actions" },
                actionButton(
                  "Delete limit",
                  async () => {
                    await api("DELETE", `limits/${enc(p.key)}`);
                    return `Limit ${p.key} deleted.`;
                  },
                  {
                    cls: "small danger-outline",
                    srLabel: p.key,
                    after: () => ctx.refresh(),
                    confirm: {
                      title: `Delete the limit of ${p.key}?`,
                      text: "Its jobs start without this policy from the next claim (a wildcard's policy still applies).",
                      confirm: "Delete limit",
                    },
                  },
                ),
              )
            : null,
        ),
      ),
      "No limits yet: every key is unlimited.",
    );
  }

  function limitForm(ctx) {
    const field = (name, label, placeholder) => formField("limit", name, label, { placeholder });
    const message = h("p", { role: "alert", class: "muted" });
    const form = h(
      "form",
      {},
      h(
        "div",
        { class: "form-grid" },
        field("key", "Key", "customer:*"),
        field("concurrency", "Concurrency (optional)", "5"),
        field("rate_count", "Rate: starts (optional)", "20"),
        field("rate_per_secs", "Rate: per seconds", "1"),
      ),
      h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Set limit")),
      message,
    );
    onCreate(ctx, form, message, async (value) => {
      const number = (name) => (value(name) === "" ? null : Number(value(name)));
      const key = value("key");
      const body = { concurrency: number("concurrency"), rate: null };
      if (value("rate_count") !== "") body.rate = { count: number("rate_count"), per_secs: number("rate_per_secs") ?? 1 };
      await api("PUT", `limits/${enc(key)}`, { body });
      return `Limit ${key} set.`;
    });
    return h("details", { class: "create panel" }, h("summary", {}, "Set a limit"), form);
  }

  // --- worker keys ----------------------------------------------------------------------------

  async function workerKeysView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    root.append(
      pageHead("Worker keys", { extra: [updated] }),
      h("p", { class: "subtitle" }, "Keys this tenant's own workers lease with, limited to its jobs (and to some queues, when a key names them). A key's token is shown once, when it is minted."),
    );
    if (may("admin")) root.append(workerKeyForm(ctx));
    root.append(body);
    await ctx.poll(async () => {
      const keys = (await ctx.api("GET", "worker-keys")).worker_keys;
      renderIfChanged(body, keys, () =>
        table(
          [["Name"], ["Id", "hide-narrow"], ["Queues"], ["Expires"], ["Created", "hide-narrow"], may("admin") ? ["Actions"] : null].filter(Boolean),
          keys.map((k) =>
            h(
              "tr",
              { "data-worker-key": k.id },
              h("td", {}, k.name),
              h("td", { class: "hide-narrow" }, h("code", {}, shortId(k.id))),
              h("td", {}, k.queues ? k.queues.join(", ") : h("span", { class: "muted" }, "every queue")),
              h("td", {}, k.expires_at ? timeEl(k.expires_at) : h("span", { class: "muted" }, "never")),
              h("td", { class: "hide-narrow" }, timeEl(k.created_at)),
              may("admin")
                ? h(
                    "td",
                    { class: "actions" },
                    actionButton(
                      "Revoke key",
                      async () => {
                        await api("DELETE", `worker-keys/${enc(k.id)}`);
                        return `Worker key ${k.name} revoked.`;
                      },
                      {
                        cls: "small danger-outline",
                        srLabel: k.name,
                        after: () => ctx.refresh(),
                        confirm: { title: `Revoke worker key ${k.name}?`, text: "Workers using it are refused within a second.", confirm: "Revoke key" },
                      },
                    ),
                  )
                : null,
            ),
          ),
          "No worker keys: workers lease with the worker token.",
        ),
      );
      updated.touch();
    }, SLOW_REFRESH_MS);
  }

  function workerKeyForm(ctx) {
    const message = h("p", { role: "alert", class: "muted" });
    const shown = h("div", { "data-minted": "" });
    const form = h(
      "form",
      {},
      h("div", { class: "form-grid" }, formField("worker-key", "name", "Name", { required: true, placeholder: "billing-workers" }), formField("worker-key", "queues", "Queues (optional, comma-separated)", { placeholder: "billing,email" })),
      h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Mint worker key")),
      message,
      shown,
    );
    onCreate(ctx, form, message, async (value) => {
      const queues = value("queues").split(",").map((q) => q.trim()).filter(Boolean);
      const body = { name: value("name") };
      if (queues.length) body.queues = queues;
      const made = await api("POST", "worker-keys", { body });
      shown.replaceChildren(h("p", {}, "Its token, shown this once: ", h("code", { "data-token": "" }, made.token)));
      return `Worker key ${made.name} minted.`;
    });
    return h("details", { class: "create panel" }, h("summary", {}, "Mint a worker key"), form);
  }

  // --- audit log (docs/access.md) -------------------------------------------------------------

  async function auditView(ctx, root, _id, params) {
    const filters = { actor: params.get("actor") || "", action: params.get("action") || "", target: params.get("target") || "" };
    const cursor = params.get("cursor") || "";
    const updated = updatedNote();
    const body = h("div");
    const more = h("div");
    const form = h(
      "form",
      { class: "filters" },
      formField("audit", "actor", "Actor", { placeholder: "key:..." }),
      formField("audit", "action", "Action", { placeholder: "cancelJob" }),
      formField("audit", "target", "Target id", {}),
      h("button", { type: "submit" }, "Apply filters"),
    );
    for (const [name, value] of Object.entries(filters)) form.elements[name].value = value;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      go(hashFor("audit", Object.fromEntries(Object.keys(filters).map((name) => [name, form.elements[name].value.trim()]))));
    });
    root.append(
      pageHead("Audit log", { extra: [updated] }),
      h("p", { class: "subtitle" }, "Every change made to this tenant through the API, newest first: who, with which role, what, and how it went."),
      form,
      body,
      more,
    );
    await ctx.poll(async () => {
      const page = await ctx.api("GET", "audit", { query: { ...filters, cursor, limit: PAGE_SIZE } });
      renderIfChanged(body, page.entries, () =>
        table(
          [["When"], ["Actor"], ["Role"], ["Action"], ["Targets"], ["Outcome"], ["Status", "num"], ["Request", "hide-narrow"]],
          page.entries.map((e) =>
            h(
              "tr",
              { "data-audit": String(e.id), "data-action": e.action },
              h("td", {}, timeEl(e.created_at)),
              h("td", { "data-col": "actor" }, h("code", {}, e.actor), e.actor_name ? h("div", { class: "muted" }, e.actor_name) : null),
              h("td", { "data-col": "role" }, e.role),
              h("td", { "data-col": "action" }, e.action),
              h(
                "td",
                {},
                (e.targets || []).map((t) => h("code", { class: "target" }, t, " ")),
                e.affected != null ? h("span", { class: "muted" }, ` ${e.affected} affected`) : null,
                e.filter ? h("div", { class: "muted" }, JSON.stringify(e.filter)) : null,
              ),
              h("td", { "data-col": "outcome" }, badge(e.outcome === "success" ? "completed" : e.outcome === "denied" ? "cancelled" : "failed", e.outcome)),
              h("td", { class: "num" }, String(e.status)),
              h("td", { class: "hide-narrow" }, h("code", {}, e.request_id || "")),
            ),
          ),
          "No entries: nothing was changed yet, or the filters match none.",
        ),
      );
      more.replaceChildren(page.next_cursor ? h("a", { href: hashFor("audit", { ...filters, cursor: page.next_cursor }), class: "button" }, "Older entries") : "");
      updated.touch();
    });
  }

  // --- tasks ----------------------------------------------------------------------------------

  async function tasksView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    root.append(
      pageHead("Tasks", { extra: [updated] }),
      h("p", { class: "subtitle" }, "Tasks that this server's in-process workers handle now. Remote workers' tasks are not listed: they lease jobs by queue."),
      body,
    );
    await ctx.poll(async () => {
      const { tasks } = await ctx.api("GET", "tasks");
      renderIfChanged(body, tasks, () =>
        table(
          [["Task"], ["Jobs"]],
          tasks.map((task) =>
            h(
              "tr",
              { "data-task": task },
              h("td", {}, h("code", {}, task)),
              h(
                "td",
                {},
                h("a", { href: hashFor("jobs", { task_name: task }), "data-fk": `t:${task}` }, "All jobs"),
                " · ",
                h("a", { href: hashFor("jobs", { task_name: task, status: "failed" }) }, "Failed"),
                " · ",
                h("a", { href: hashFor("dlq", { task_name: task }) }, "Dead letters"),
              ),
            ),
          ),
          "No in-process worker is running.",
        ),
      );
      updated.touch();
    }, SLOW_REFRESH_MS);
  }

  // --- workers (docs/visibility.md) -----------------------------------------------------------

  async function workersView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    root.append(
      pageHead("Workers", { extra: [updated] }),
      h(
        "p",
        { class: "subtitle" },
        "Workers that named themselves when they leased this tenant's jobs (a lease's worker_id). A worker seen within two minutes is live.",
      ),
      body,
    );
    await ctx.poll(async () => {
      const { workers } = await ctx.api("GET", "workers");
      renderIfChanged(body, workers, () =>
        table(
          [["Worker"], ["State"], ["Queues"], ["Jobs held", "num"], ["Last seen"], ["First seen", "hide-narrow"], ["Host"], ["SDK"], ["Tasks", "hide-narrow"]],
          workers.map((w) => {
            const info = w.info || {};
            return h(
              "tr",
              { "data-worker": w.worker_id },
              h("td", {}, idRef("worker", w.worker_id, null, { full: true })),
              h("td", {}, w.live ? badge("completed", "live") : badge("cancelled", "gone")),
              h(
                "td",
                {},
                w.queues.map((q, i) => [i ? ", " : "", h("a", { href: hashFor("jobs", { queue: q }) }, q)]),
              ),
              h("td", { class: "num" }, String(w.in_flight)),
              h("td", {}, timeEl(w.last_seen_at)),
              h("td", { class: "hide-narrow" }, timeEl(w.first_seen_at)),
              h("td", {}, info.hostname || h("span", { class: "muted" }, "—")),
              h("td", {}, info.sdk ? `${info.sdk}${info.version ? ` ${info.version}` : ""}` : h("span", { class: "muted" }, "—")),
              h("td", { class: "hide-narrow" }, (info.tasks || []).map((task, i) => [i ? " " : "", h("code", {}, task)])),
            );
          }),
          "No worker has named itself yet: workers appear here once they lease with a worker_id.",
        ),
      );
      updated.touch();
    }, REFRESH_MS);
  }

  // --- push endpoints (docs/push.md) ----------------------------------------------------------

  const RECENT_DELIVERIES = 50;
  // The breaker's state as the endpoint's GET reports it, and a delivery's outcome, drawn with the
  // status colour each resembles.
  const BREAKER_STATUS = { closed: "active", open: "failed", half_open: "retrying" };
  const DELIVERY_STATUS = { completed: "completed", accepted: "running", retry: "retrying", failed: "failed", lost: "cancelled" };
  const ROTATION_GRACES = [
    ["86400", "1 day"],
    ["3600", "1 hour"],
    ["604800", "7 days"],
    ["0", "no time: it stops signing at once"],
  ];

  // The endpoint's health: its breaker's state, its failures in a row, and when an open one lets a
  // delivery try again.
  function breakerHealth(breaker) {
    const n = breaker.consecutive_failures;
    return h(
      "span",
      { class: "health", "data-breaker": breaker.state },
      badge(BREAKER_STATUS[breaker.state] || breaker.state, breaker.state.replace(/_/g, "-")),
      " ",
      h("span", { class: "muted", "data-failures": String(n) }, n ? `${n} failure${n === 1 ? "" : "s"} in a row` : "no failure in a row"),
      breaker.state === "open" && breaker.open_until ? h("span", { class: "muted" }, " · half-open ", timeEl(breaker.open_until)) : null,
    );
  }

  function queueLinks(queues) {
    return queues.map((q, i) => [i ? ", " : "", h("a", { href: `#/queues/${enc(q)}` }, q)]);
  }

  async function setEndpointPaused(endpoint, paused) {
    await api("PATCH", `push-endpoints/${enc(endpoint.id)}`, { body: { paused } });
    return paused ? `Push endpoint ${endpoint.name} paused.` : `Push endpoint ${endpoint.name} resumed.`;
  }

  function endpointPauseButton(ctx, endpoint, cls = "") {
    if (endpoint.paused) {
      return actionButton("Resume endpoint", () => setEndpointPaused(endpoint, false), {
        cls,
        srLabel: endpoint.name,
        after: () => ctx.refresh(),
      });
    }
    return actionButton("Pause endpoint", () => setEndpointPaused(endpoint, true), {
      cls: `${cls} danger-outline`,
      srLabel: endpoint.name,
      after: () => ctx.refresh(),
      confirm: {
        title: `Pause push endpoint ${endpoint.name}?`,
        text: "No new delivery goes to it until it is resumed: the jobs of its queues wait, spending no retries. Deliveries already sent finish.",
        confirm: "Pause endpoint",
      },
    });
  }

  async function pushEndpointsView(ctx, root) {
    const updated = updatedNote();
    const body = h("div");
    root.append(
      pageHead("Push endpoints", { extra: [updated] }),
      h(
        "p",
        { class: "subtitle" },
        "HTTP endpoints the pusher calls, signed, with each of this tenant's jobs on their queues; a bound queue is drained by push only. Create and remove them with the API or ",
        h("code", {}, "queueflow push-endpoint"),
        " (docs/push.md).",
      ),
      body,
    );
    await ctx.poll(async () => {
      const endpoints = (await ctx.api("GET", "push-endpoints")).push_endpoints;
      renderIfChanged(body, endpoints, () =>
        table(
          [["Endpoint"], ["URL"], ["Queues"], ["Concurrency", "num"], ["Time-out", "num hide-narrow"], ["State"], ["Health"], may("admin") ? ["Actions"] : null].filter(Boolean),
          endpoints.map((e) =>
            h(
              "tr",
              { "data-endpoint": e.id },
              h("td", {}, h("a", { href: `#/push-endpoints/${enc(e.id)}`, "data-fk": `p:${e.id}` }, e.name)),
              h("td", { class: "url" }, h("span", { class: "mono", title: e.url }, clip(e.url, 64))),
              h("td", { "data-col": "queues" }, queueLinks(e.queues)),
              h("td", { class: "num" }, String(e.concurrency)),
              h("td", { class: "num hide-narrow" }, `${e.timeout_secs} s`),
              h("td", { "data-col": "state" }, e.paused ? badge("paused") : badge("active")),
              h("td", { "data-col": "health" }, breakerHealth(e.breaker)),
              may("admin") ? h("td", { class: "actions" }, endpointPauseButton(ctx, e, "small")) : null,
            ),
          ),
          "No push endpoints yet: every queue is drained by workers that lease.",
        ),
      );
      updated.touch();
    });
  }

  function deliveriesTable(deliveries) {
    return table(
      [["Delivered"], ["Job"], ["Attempt", "num"], ["HTTP status", "num"], ["Outcome"], ["Latency", "num"], ["Answer or error"]],
      deliveries.map((d) => {
        const said = d.error || d.body || "";
        return h(
          "tr",
          { "data-job": d.job_id, "data-attempt": String(d.attempt), "data-outcome": d.outcome },
          h("td", {}, timeEl(d.delivered_at)),
          h("td", {}, idRef("job", d.job_id, `#/jobs/${enc(d.job_id)}`, { fk: `pd:${d.webhook_id}` })),
          h("td", { class: "num" }, String(d.attempt)),
          h("td", { class: "num", "data-col": "status" }, d.status != null ? String(d.status) : h("span", { class: "muted", title: "No answer came: a time-out, or a refused or failed connection." }, "none")),
          h("td", {}, badge(DELIVERY_STATUS[d.outcome] || d.outcome, d.outcome)),
          h("td", { class: "num" }, secondsLabel(d.latency_ms / 1000)),
          h("td", { class: `${d.error ? "error-cell" : ""} answer-cell`, title: said || null }, clip(said, 160)),
        );
      }),
      "No delivery yet: none of its queues' jobs has been sent to it.",
    );
  }

  // The secret a rotation answered with: shown once, here, until the operator leaves the page.
  function secretPanel(made, onHide) {
    const expires = made.previous_secret_expires_at;
    return h(
      "section",
      { class: "panel secret-panel", "aria-labelledby": "secret-h" },
      h("h2", { id: "secret-h" }, "New signing secret"),
      h(
        "p",
        { class: "secret-line" },
        h("code", { class: "secret", id: "new-secret" }, made.secret),
        copyValueButton(made.secret, {
          label: "Copy secret",
          title: "Copy the new secret",
          copied: "Copied the new secret.",
          failed: "Could not copy: select the secret and copy it.",
        }),
      ),
      h(
        "p",
        { class: "secret-note" },
        h("strong", {}, "Shown only now: "),
        "copy it to your receiver. The API shows a secret only in the answer that made it; leaving or reloading this page loses it (rotate again for another). ",
        expires ? ["The previous secret keeps signing beside it until ", timeEl(expires), "."] : "The previous secret no longer signs.",
      ),
      h("button", { type: "button", class: "quiet small", onclick: onHide }, "Hide secret"),
    );
  }

  function rotateButton(ctx, endpoint, show) {
    const grace = h("select", { id: "rotate-grace" }, ROTATION_GRACES.map(([value, label]) => h("option", { value }, label)));
    return actionButton(
      "Rotate secret",
      async () => {
        const path = `push-endpoints/${enc(endpoint.id)}/rotate-secret`;
        show(await api("POST", path, { body: { grace_secs: Number(grace.value) } }));
        return `Push endpoint ${endpoint.name} has a new secret: copy it now.`;
      },
      {
        cls: "danger-outline",
        after: () => ctx.refresh(),
        confirm: {
          title: `Rotate the secret of ${endpoint.name}?`,
          text: [
            "A new secret signs every delivery from now on. It is shown once, on this page, right after.",
            h("div", { class: "field" }, h("label", { for: "rotate-grace" }, "The current secret keeps signing beside it for"), grace),
            "Give your receiver the new secret before that ends.",
          ],
          confirm: "Rotate secret",
        },
      },
    );
  }

  async function pushEndpointView(ctx, root, id) {
    const path = `push-endpoints/${enc(id)}`;
    const updated = updatedNote();
    const head = h("div");
    const secretSlot = h("div");
    const facts = h("div");
    const deliveries = h("div");
    const showSecret = (made) => secretSlot.replaceChildren(secretPanel(made, () => secretSlot.replaceChildren()));
    root.append(
      head,
      secretSlot,
      h("section", { "aria-label": "Endpoint settings" }, facts),
      h(
        "section",
        { class: "block", "aria-labelledby": "deliveries-h" },
        h("h2", { id: "deliveries-h" }, "Recent deliveries"),
        h("p", { class: "subtitle" }, `The last ${RECENT_DELIVERIES} HTTP deliveries to it, newest first: each job's attempts carry them too.`),
        deliveries,
      ),
    );
    await ctx.poll(async () => {
      const [endpoint, recent] = await Promise.all([
        ctx.api("GET", path),
        ctx.api("GET", `${path}/deliveries`, { query: { limit: RECENT_DELIVERIES } }),
      ]);
      renderIfChanged(head, endpoint, () => [
        pageHead(`Push endpoint ${endpoint.name}`, {
          badges: [endpoint.paused ? badge("paused") : badge("active")],
          extra: [updated],
          actions: [
            h("button", { type: "button", class: "quiet", onclick: () => ctx.refresh() }, "Refresh"),
            may("admin") ? [endpointPauseButton(ctx, endpoint), rotateButton(ctx, endpoint, showSecret)] : null,
          ].flat().filter(Boolean),
        }),
        h("p", { class: "subtitle" }, idRef("push endpoint", endpoint.id, null, { full: true })),
      ]);
      renderIfChanged(facts, endpoint, () =>
        h(
          "dl",
          { class: "facts" },
          fact("URL", h("span", { class: "mono", "data-col": "url" }, endpoint.url)),
          fact("Queues", h("span", { "data-col": "queues" }, queueLinks(endpoint.queues))),
          fact("Concurrency", `${endpoint.concurrency} at a time`),
          fact("Time-out", `${endpoint.timeout_secs} s`),
          fact("State", h("span", { "data-col": "state" }, endpoint.paused ? badge("paused") : badge("active"))),
          fact("Health", breakerHealth(endpoint.breaker)),
          fact(
            "Static headers",
            endpoint.headers ? h("span", { title: "Their values are not shown here." }, Object.keys(endpoint.headers).map((name, i) => [i ? ", " : "", h("code", {}, name)])) : h("span", { class: "muted" }, "none"),
          ),
          endpoint.previous_secret_expires_at ? fact("Previous secret signs until", timeEl(endpoint.previous_secret_expires_at)) : null,
          fact("Created", timeEl(endpoint.created_at)),
          fact("Updated", timeEl(endpoint.updated_at)),
        ),
      );
      renderIfChanged(deliveries, recent.deliveries, () => deliveriesTable(recent.deliveries));
      updated.touch();
    });
  }

  // --- keyboard -------------------------------------------------------------------------------

  const GO_KEYS = { o: "#/", q: "#/queues", j: "#/jobs", w: "#/workflows", d: "#/dlq", c: "#/cron", t: "#/tasks", k: "#/workers", p: "#/push-endpoints" };

  function setUpKeyboard() {
    let pendingG = 0;
    document.addEventListener("keydown", (event) => {
      if (event.ctrlKey || event.metaKey || event.altKey || !signedIn()) return;
      const target = event.target;
      if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
      if (document.querySelector("dialog[open]")) return; // a dialog has the keyboard
      if (pendingG && Date.now() - pendingG < 1500 && GO_KEYS[event.key]) {
        event.preventDefault();
        pendingG = 0;
        go(GO_KEYS[event.key]);
        return;
      }
      pendingG = 0;
      if (event.key === "g") pendingG = Date.now();
      else if (event.key === "/") {
        const first = document.querySelector("[data-filter-first]");
        if (first) {
          event.preventDefault();
          first.focus();
        }
      } else if (event.key === "r") state.view?.refresh?.();
      else if (event.key === "?") $("shortcuts").showModal();
    });
  }

  // --- start ----------------------------------------------------------------------------------

  async function start() {
    setUpSignIn();
    setUpKeyboard();
    $("skip-link").addEventListener("click", () => $("main").focus());
    window.addEventListener("hashchange", route);
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) state.view?.refresh?.();
    });
    setInterval(refreshTimes, 10000);
    const notice = takeSignInNotice();
    const auth = await authState();
    state.sso = Boolean(auth.sso);
    state.tokenLogin = !state.sso || Boolean(auth.token_login);
    if (auth.session) {
      try {
        await signInWithSession(auth.session);
      } catch (error) {
        if (error instanceof SignedOut) return;
        signOut(`Could not reach the server: ${error.message}`);
      }
      return;
    }
    const token = state.tokenLogin ? sessionStorage.getItem(TOKEN_KEY) : null;
    if (!token) {
      signOut(notice ? notice.text : "", notice ? notice.kind : "error");
      return;
    }
    try {
      await signIn(token);
    } catch (error) {
      if (error instanceof SignedOut) return;
      signOut("");
      $("signin-message").textContent = `Could not reach the server: ${error.message}`;
      state.token = null;
    }
  }

  start();
})();
