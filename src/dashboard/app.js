// The dashboard: a client of the public API only. Hash routes (#/projects, #/projects/<slug>,
// #/tokens, #/notifications, #/audit); every page is rebuilt from the API when shown.
import { api, ApiError, session, enc } from "./api.js";
import { h, field, form, byId, flash, act, describe, ago, badge, table, size } from "./ui.js";
import { projectPage } from "./project.js";
import { notificationsPage } from "./notifications.js";
import { lineChart, sparkline } from "./charts.js";

/** @typedef {(...nodes: Node[]) => void} Show puts a page's nodes in <main> */

const main = byId("main");

// A page renders after its API calls: it shows only if the address is still the one it was
// made for (a slow page, or a reload after a deployment ends, never covers a newer one).
/** @type {Show} */
let show = () => {};
/** @param {string} hash @returns {Show} */
function showFor(hash) {
  return (...nodes) => {
    if ((location.hash || "#/projects") !== hash) return;
    main.replaceChildren(...nodes);
    main.focus({ preventScroll: true });
  };
}

/** @param {string} [message] */
function loginPage(message) {
  byId("nav").hidden = true;
  const input = h("input", { id: "token", type: "password", autocomplete: "off", placeholder: "slw_…" });
  const form = h("form", { class: "card login", onsubmit: async (/** @type {Event} */ event) => {
    event.preventDefault();
    session.signIn(input.value.trim());
    try { await api("GET", "/api/system"); route(); }
    catch (error) { session.signOut(); flash(describe(error)); }
  } },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an API token. On the server: ", h("code", {}, "cat /var/lib/slipway/initial-admin-token"),
      " (with ", h("code", {}, "serve --dev"), ": ", h("code", {}, "cat .slipway/initial-admin-token"),
      " where it runs), or ", h("code", {}, "slipway token create --name me"), ". It is kept for this tab only."),
    h("label", { for: "token" }, "API token"), input, h("button", { class: "primary", type: "submit" }, "Sign in"));
  if (message) flash(message);
  show(form);
  input.focus();
}

async function systemLine() {
  const system = await api("GET", "/api/system");
  const line = byId("system");
  line.hidden = false;
  line.textContent = `Slipway ${system.version} · sandbox ${system.sandboxMode} · TLS ${system.tlsMode} · apps at *.${system.appsDomain}`;
  line.className = system.sandboxMode === "none" ? "system warning" : "system";
  if (system.sandboxMode === "none") line.textContent += " — builds and apps run without isolation";
}

/**
 * A project's last hour at a glance: a line of its requests per minute and the figures in words.
 * @param {any} history the API's UsageHistory (minutes of the last hour), or null
 * @returns {HTMLElement | string}
 */
function lastHour(history) {
  if (!history) return "—";
  /** @type {any[]} */
  const points = history.points;
  const requests = points.reduce((n, p) => n + p.requestsTotal, 0);
  const errors = points.reduce((n, p) => n + p.requests["5xx"], 0);
  const words = `${requests} requests, ${errors} errors in the last hour`;
  // One slot per minute of the hour; a minute without a sample (the daemon was down) is 0.
  const from = Date.parse(history.from);
  /** @type {number[]} */
  const minutes = new Array(60).fill(0);
  for (const p of points) {
    const slot = Math.floor((Date.parse(p.at) - from) / 60e3);
    if (slot >= 0 && slot < 60) minutes[slot] += p.requestsTotal;
  }
  return h("span", { class: "glance", "data-requests": requests, "data-errors": errors },
    sparkline(minutes, words), h("span", {}, `${requests} req · ${errors} err`));
}

/** @param {Show} show */
async function projectsPage(show) {
  /** @type {{projects: any[]}} */
  const { projects } = await api("GET", "/api/projects?limit=200");
  /** @type {string[]} */
  const failures = [];
  const hour = `step=minute&from=${enc(new Date(Date.now() - 3600e3).toISOString())}`;
  const [lastDeployments, histories, machine] = await Promise.all([
    Promise.all(projects.map((p) =>
      api("GET", `/api/projects/${enc(p.slug)}/deployments?limit=1`).then((d) => d.deployments[0])
        .catch((error) => { failures.push(`${p.slug}: ${describe(error)}`); return null; }))),
    Promise.all(projects.map((p) => api("GET", `/api/projects/${enc(p.slug)}/usage/history?${hour}`).catch(() => null))),
    // The machine's figures are the operator's: another token gets 403 and no card.
    api("GET", `/api/usage/history?${hour}`).catch(() => null)]);
  const rows = projects.map((p, i) => {
    const last = lastDeployments[i];
    return [h("a", { href: `#/projects/${enc(p.slug)}` }, p.slug), badge(p.state), lastHour(histories[i]),
      h("a", { href: p.url, target: "_blank", rel: "noopener noreferrer" }, p.url),
      last ? h("span", {}, badge(last.state), " ", ago(last.createdAt)) : "—"];
  });
  show(h("div", { class: "row" }, h("h1", { class: "grow" }, "Projects"),
      h("a", { href: "#/new" }, h("button", { class: "primary", tabindex: -1 }, "New project"))),
    h("div", { class: "card" }, table(["Project", "State", "Last hour", "URL", "Last deployment"], rows, [3, 4])),
    ...(machine ? [machineCard(machine)] : []));
  if (failures.length) flash(`Could not read the last deployment of ${failures.join("; ")}`);
}

/**
 * This machine's last hour, for the operator: CPU, memory, disk, connections.
 * @param {any} history the API's MachineHistory
 * @returns {HTMLElement}
 */
function machineCard(history) {
  /** @type {any[]} */
  const points = history.points;
  const to = Date.parse(history.to), from = Date.parse(history.from);
  const base = { times: points.map((p) => Date.parse(p.at)), from, to, step: 60e3 };
  const last = points[points.length - 1];
  const percent = (/** @type {number} */ v) => `${Math.round(v * 1000) / 10} %`;
  return h("section", { class: "card", id: "machine", "aria-labelledby": "machine-title" },
    h("h2", { id: "machine-title" }, "This machine, last hour"),
    last ? h("p", { class: "muted", id: "machine-disk" }, `Disk (data directory): ${size(last.diskUsedBytes)} of ${size(last.diskTotalBytes)} used.`) : null,
    h("div", { class: "charts" },
      lineChart({ ...base, id: "chart-machine-cpu", title: "CPU busy", format: percent, limit: 1,
        series: [{ name: "CPU busy", cls: "cpu", values: points.map((p) => p.cpuBusy) }] }),
      lineChart({ ...base, id: "chart-machine-memory", title: "Memory used", format: size, scale: 1073741824, limit: last ? last.memoryTotalBytes : null,
        series: [{ name: "Memory used", cls: "memory", values: points.map((p) => p.memoryUsedBytes) }] }),
      lineChart({ ...base, id: "chart-machine-connections", title: "Open visitor connections", format: (v) => String(Math.round(v)),
        series: [{ name: "Connections", cls: "requests", values: points.map((p) => p.connections) }] })));
}

/** @param {Show} show */
function newProjectPage(show) {
  const slug = h("input", { id: "new-slug", required: true, pattern: "[a-z0-9]+(-[a-z0-9]+)*", placeholder: "my-site" });
  const file = h("input", { id: "new-archive", type: "file", accept: ".tar.gz,.tgz,application/gzip" });
  const gitUrl = h("input", { id: "new-git", placeholder: "https://git.example.com/me/site.git", class: "grow" });
  const install = h("input", { id: "new-install", placeholder: "auto" });
  const build = h("input", { id: "new-build", placeholder: "auto" });
  const start = h("input", { id: "new-start", placeholder: "auto (empty: static site)" });
  const output = h("input", { id: "new-output", placeholder: "auto" });
  const submit = h("button", { class: "primary", type: "submit", id: "new-submit" }, "Create and deploy");
  const page = form({ class: "card" }, async () => {
    const name = slug.value.trim();
    await api("POST", "/api/projects", { slug: name });
    /** @type {Record<string, string>} */
    const body = { projectSlug: name };
    const commands = { installCommand: install, buildCommand: build, startCommand: start, outputDirectory: output };
    let any = false;
    for (const [key, input] of Object.entries(commands)) if (input.value.trim()) { body[key] = input.value.trim(); any = true; }
    if (!any) body.framework = "auto";
    const archive = file.files && file.files[0];
    if (archive) await api("POST", `/api/projects/${enc(name)}/source`, archive, "application/gzip");
    else if (gitUrl.value.trim()) body.gitUrl = gitUrl.value.trim();
    else throw new Error("Choose a .tar.gz archive or give a git repository URL.");
    const started = await api("POST", `/api/projects/${enc(name)}/provision`, body);
    location.hash = `#/projects/${enc(name)}/deployments/${enc(started.deploymentId)}`;
  },
    h("h1", {}, "New project"),
    field("Project name (lower case, digits, dashes)", slug),
    h("p", { class: "muted" }, "Source: a .tar.gz of the project, or a git repository."),
    field("Source archive (.tar.gz)", file), field("or Git repository URL", gitUrl),
    h("p", { class: "muted" }, "Commands: leave all empty and Slipway detects them from the source."),
    field("Install command", install), field("Build command", build), field("Start command", start),
    field("Output directory", output),
    h("p", {}, submit));
  show(page);
  slug.focus();
}

/** @param {Show} show */
async function tokensPage(show) {
  const [{ tokens }, { projects }] = await Promise.all([api("GET", "/api/tokens?limit=200"), api("GET", "/api/projects?limit=200")]);
  const name = h("input", { id: "token-name", placeholder: "ci-deploy", maxlength: 100 });
  const scope = h("select", { id: "token-scope" }, ["read", "deploy", "admin"].map((s) => h("option", { value: s }, s)));
  const only = h("select", { id: "token-projects", multiple: true },
    projects.map((/** @type {any} */ p) => h("option", { value: p.slug }, p.slug)));
  const days = h("input", { id: "token-days", type: "number", min: 1, max: 3650, placeholder: "never" });
  const create = h("button", { class: "primary", type: "submit", id: "token-create" }, "Create token");
  const createToken = async () => {
    /** @type {{name: string, scope: string, projects?: string[], expiresInDays?: number}} */
    const body = { name: name.value.trim() || "dashboard", scope: scope.value };
    /** @type {string[]} */
    const chosen = [...only.selectedOptions].map((o) => o.value);
    if (chosen.length) body.projects = chosen;
    if (days.value) body.expiresInDays = Number(days.value);
    const token = await api("POST", "/api/tokens", body);
    await tokensPage(show);
    byId("token-created").replaceChildren(h("div", { class: "secret" },
      `New ${token.scope} token "${token.name}" (shown once; keep it in a secret store):`, h("br"), h("code", { id: "token-secret" }, token.token)));
  };
  const rows = tokens.map((/** @type {any} */ t) => [t.name, badge(t.scope), t.projects ? t.projects.join(", ") : "all",
    ago(t.lastUsedAt), t.expiresAt ? ago(t.expiresAt).replace(" ago", "") : "never",
    h("button", { class: "danger", onclick: (/** @type {Event} */ e) => confirm(`Revoke ${t.name}?`) &&
      act(e.target, async () => { await api("DELETE", `/api/tokens/${enc(t.id)}`); await tokensPage(show); flash("Token revoked.", "info"); }) }, "Revoke")]);
  show(h("h1", {}, "API tokens"),
    h("div", { class: "card" }, h("h2", {}, "Create a token"),
      form({ class: "row fields" }, createToken, field("Name", name), field("Scope", scope),
        field("Only these projects (none: all)", only), field("Expires in (days)", days), create),
      h("p", { class: "muted" }, "read: look only · deploy: deploy and change env vars · admin: everything, tokens included. Select projects to limit the token to them."),
      h("div", { id: "token-created" })),
    h("div", { class: "card" }, table(["Name", "Scope", "Projects", "Last used", "Expires", ""], rows, [2, 4])));
}

/** @param {Show} show */
async function auditPage(show) {
  const { entries } = await api("GET", "/api/audit?limit=100");
  const rows = entries.map((/** @type {any} */ e) => [ago(e.at), e.tokenName, h("span", { class: "mono" }, `${e.method} ${e.route}`), e.target || "—", badge(String(e.status)), e.ip]);
  show(h("h1", {}, "Audit log"), h("div", { class: "card" }, table(["When", "Token", "Request", "Target", "Status", "From"], rows, [3, 5])));
}

/** @type {[RegExp, (match: RegExpMatchArray) => Promise<void> | void][]} */
const routes = [
  [/^#\/projects\/([^/]+)(?:\/([a-z]+)(?:\/([^/]+))?)?$/, (m) => projectPage(show, decodeURIComponent(m[1]), m[2] || "deployments", m[3] && decodeURIComponent(m[3]))],
  [/^#\/new$/, () => newProjectPage(show)],
  [/^#\/tokens$/, () => tokensPage(show)],
  [/^#\/notifications$/, () => notificationsPage(show)],
  [/^#\/audit$/, () => auditPage(show)],
  [/^.*$/, () => projectsPage(show)],
];

export async function route() {
  const hash = location.hash || "#/projects";
  show = showFor(hash);
  if (!session.token) return loginPage();
  byId("nav").hidden = false;
  for (const link of document.querySelectorAll("#nav a")) link.toggleAttribute("aria-current", hash.startsWith(link.getAttribute("href") || "#"));
  try {
    await systemLine();
    for (const [pattern, page] of routes) {
      const match = hash.match(pattern);
      if (match) { await page(match); break; }
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) { session.signOut(); return loginPage(describe(error)); }
    flash(describe(error));
  }
  return undefined;
}

byId("signout").addEventListener("click", () => { session.signOut(); location.hash = ""; loginPage(); });
window.addEventListener("hashchange", () => { flash(""); route(); });
route();
