// One project: deployments with live logs and progress (redeploy, rollback, cancel), usage
// charts (usage.js), processes (the
// live deployment's types and instances, scaled in processes.js), jobs (one-off runs and
// cron jobs, in jobs.js and runs.js), add-ons (addons.js, addon.js, backups.js), env vars,
// domains, git settings with webhook and deploy hooks, previews.
import { api, enc, absolute, followLogs } from "./api.js";
import { h, field, form, byId, flash, act, describe, ago, duration, badge, table } from "./ui.js";
import { processes } from "./processes.js";
import { jobs } from "./jobs.js";
import { addons } from "./addons.js";
import { usage } from "./usage.js";
import { showProgress } from "./progress.js";

/** @typedef {(body: HTMLElement, project: any, base: string, deploymentId: string | undefined, reload: () => Promise<void>) => Promise<void>} Tab */

/** @type {(() => void) | null} */
let stopFollowing = null;
window.addEventListener("hashchange", () => { if (stopFollowing) { stopFollowing(); stopFollowing = null; } });

const TABS = [["deployments", "Deployments"], ["usage", "Usage"], ["processes", "Processes"], ["jobs", "Jobs"], ["addons", "Add-ons"], ["env", "Environment"], ["domains", "Domains"], ["git", "Git & hooks"], ["previews", "Previews"]];

/**
 * @param {(...nodes: Node[]) => void} show
 * @param {string} slug
 * @param {string} tab
 * @param {string} [deploymentId]
 * @returns {Promise<void>}
 */
export async function projectPage(show, slug, tab, deploymentId) {
  const project = await api("GET", `/api/projects/${enc(slug)}`);
  const base = `#/projects/${enc(slug)}`;
  const again = () => projectPage(show, slug, tab, deploymentId);
  const header = h("div", {},
    h("div", { class: "row" }, h("h1", { class: "grow" }, project.slug, " ", badge(project.state), " ", badge(project.appState)),
      sleepButton(project, again),
      h("a", { href: project.url, target: "_blank", rel: "noopener noreferrer" }, project.url)),
    h("nav", { class: "tabs", "aria-label": "Project" }, TABS.map(([id, label]) =>
      h("a", { href: `${base}/${id}`, "aria-current": tab === id ? "page" : null }, label))));
  const body = h("div");
  show(header, body);
  /** @type {Record<string, Tab>} */
  const pages = { deployments, usage, processes, jobs, addons, env, domains, git, previews };
  await (pages[tab] || deployments)(body, project, base, deploymentId, () => projectPage(show, slug, tab, deploymentId));
}

// Scale to zero: a running app can be put to sleep, a sleeping one woken (the page then
// reloads until it runs).
/** @param {any} project @param {() => Promise<void>} reload @returns {Node | string} */
function sleepButton(project, reload) {
  const action = project.appState === "running" ? "sleep" : project.appState === "sleeping" ? "wake" : null;
  if (!action) return "";
  const button = h("button", { id: `app-${action}` }, action === "sleep" ? "Sleep" : "Wake");
  button.addEventListener("click", () => act(button, async () => {
    await api("POST", `/api/projects/${enc(project.slug)}/${action}`);
    for (let i = 0; i < 120; i++) {
      const now = await api("GET", `/api/projects/${enc(project.slug)}`);
      if (now.appState !== "waking") break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await reload();
  }));
  return button;
}

/** @param {any} project @returns {Record<string, string>} */
function redeployBody(project) {
  const s = project.settings || {};
  /** @type {Record<string, string>} */
  const body = { projectSlug: project.slug };
  for (const key of ["installCommand", "buildCommand", "startCommand", "outputDirectory", "healthCheckPath", "framework", "gitUrl"]) if (s[key]) body[key] = s[key];
  if (s.gitUrl) body.gitRef = s.productionBranch || "main";
  if (!s.installCommand && !s.buildCommand && !s.startCommand) body.framework = "auto";
  return body;
}

// A run's final status: a rollback answers 202 and goes live once its app is up.
/** @param {string} runId @returns {Promise<any>} */
async function finished(runId) {
  for (;;) {
    const status = await api("GET", `/api/provisioning/${enc(runId)}/status`);
    if (["provisioning_complete", "provisioning_failed", "provisioning_canceled"].includes(status.status)) return status;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** @type {Tab} */
async function deployments(body, project, base, selected, reload) {
  const { deployments } = await api("GET", `/api/projects/${enc(project.slug)}/deployments?limit=50`);
  const chosen = selected || (deployments[0] && deployments[0].id);
  // Its stream replays a finished run and ends at once: reload only when a run being
  // watched ends, or the page would reload itself forever.
  const watching = deployments.some((/** @type {any} */ d) => d.id === chosen && d.state === "building");
  const redeploy = h("button", { class: "primary", id: "redeploy" }, "Redeploy");
  redeploy.addEventListener("click", () => act(redeploy, async () => {
    const started = await api("POST", `/api/projects/${enc(project.slug)}/provision`, redeployBody(project));
    location.hash = `${base}/deployments/${enc(started.deploymentId)}`;
  }));
  const rows = deployments.map((/** @type {any} */ d) => {
    const actions = [];
    if (d.state === "inactive" && d.mode) actions.push(h("button", { class: "rollback", "data-id": d.id, onclick: (/** @type {Event} */ e) => act(e.target, async () => {
      const run = await api("POST", `/api/projects/${enc(project.slug)}/rollback`, { deploymentId: d.id });
      flash(`Rolling back to ${d.id}…`, "info");
      const done = await finished(run.provisioningId);
      if (done.status === "provisioning_complete") flash(`Rolled back to ${d.id}: it is live.`, "info");
      else flash(`The rollback to ${d.id} ended ${done.status}${done.error ? ": " + done.error.message : ""}`);
      await reload();
    }) }, "Roll back"));
    if (d.state === "building") actions.push(h("button", { class: "danger cancel", onclick: (/** @type {Event} */ e) => act(e.target, async () => {
      await api("POST", `/api/provisioning/${enc(d.provisioningId)}/cancel`); await reload();
    }) }, "Cancel"));
    return [h("a", { href: `${base}/deployments/${enc(d.id)}`, class: "mono", "aria-current": d.id === chosen ? "true" : null }, d.id.slice(0, 12)),
      h("span", {}, badge(d.live ? "live" : d.state), d.error ? h("div", { class: "muted" }, d.error.code) : null),
      `${d.environment}${d.branch ? " · " + d.branch : ""}`, d.commit ? h("code", {}, d.commit.slice(0, 8)) : "—",
      d.trigger, duration(d.createdAt, d.finishedAt), ago(d.createdAt), h("div", { class: "row" }, actions)];
  });
  const logs = h("div", { class: "logs", id: "logs", role: "log", "aria-live": "polite", tabindex: 0 });
  const state = h("span", { class: "muted", id: "log-state" });
  const progress = h("div", { class: "progress", id: "progress" });
  const steps = h("div", { class: "steps", id: "steps" });
  body.append(h("div", { class: "row" }, h("div", { class: "grow muted" }, `${deployments.length} deployment(s)`), redeploy),
    h("div", { class: "card" }, table(["Deployment", "State", "Environment", "Commit", "Trigger", "Duration", "Created", ""], rows, [2, 3, 4])),
    // Only when there is a deployment to show (append writes a null as the text "null").
    ...(chosen ? [h("div", { class: "card" }, h("div", { class: "row" }, h("h2", { class: "grow" }, "Logs of ", h("code", {}, chosen)), state), progress, steps, logs)] : []));
  if (!chosen) return;
  if (stopFollowing) stopFollowing();
  stopFollowing = followLogs(chosen, (type, data) => {
    if (type === "log") {
      const stick = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 8;
      logs.append(h("div", { class: data.stream }, `[${data.stream}] ${data.message}`));
      if (stick) logs.scrollTop = logs.scrollHeight;
    } else if (type === "status" && data && data.steps) {
      showProgress(progress, steps, data);
    } else if (type === "end" && watching) {
      setTimeout(reload, 300);
    }
  }, (phase, error) => {
    state.textContent = phase === "live" ? "following live" : phase === "ended" ? "finished"
      : phase === "error" ? describe(error) : error ? `reconnecting… (${describe(error)})` : "reconnecting…";
  });
}

/** Where a variable applies, in words. @param {any} scope @returns {string} */
function appliesTo(scope) {
  if (!scope) return "Production and previews";
  const previews = scope.branch ? `previews of ${scope.branch}` : "previews";
  const production = scope.environments.includes("production");
  const preview = scope.environments.includes("preview");
  if (production && preview) return `Production and ${previews}`;
  if (production) return "Production only";
  return previews.charAt(0).toUpperCase() + previews.slice(1) + " only";
}

/** @type {Tab} */
async function env(body, project, _base, _id, reload) {
  const { envVars, scopes } = await api("GET", `/api/projects/${enc(project.slug)}/env-vars`);
  const previewsOn = Boolean((project.settings || {}).previews);
  const rows = Object.entries(envVars).map(([key, value]) => {
    const shown = h("code", { class: "env-value" }, "••••••••");
    let visible = false;
    const reveal = h("button", { class: "link" }, "Reveal");
    reveal.addEventListener("click", () => { visible = !visible; shown.textContent = visible ? value : "••••••••"; reveal.textContent = visible ? "Hide" : "Reveal"; });
    return [h("code", {}, key), h("span", {}, shown, " ", reveal), appliesTo((scopes || {})[key]),
      h("button", { class: "danger", onclick: (/** @type {Event} */ e) => confirm(`Delete ${key}?`) && act(e.target, async () => {
        await api("DELETE", `/api/projects/${enc(project.slug)}/env-vars/${enc(key)}`); await reload(); flash(`${key} deleted; redeploy to apply.`, "info");
      }) }, "Delete")];
  });
  const text = h("textarea", { id: "env-input", rows: 4, class: "grow mono", placeholder: "KEY=value, one per line" });
  // With previews on, the form asks where new variables apply.
  const applies = /** @type {HTMLSelectElement} */ (h("select", { id: "env-applies" },
    h("option", { value: "both" }, "Production and previews"),
    h("option", { value: "production" }, "Production only"),
    h("option", { value: "preview" }, "Previews only"),
    h("option", { value: "branch" }, "One branch's previews only")));
  const branch = /** @type {HTMLInputElement} */ (h("input", { id: "env-branch", placeholder: "feature-x" }));
  const branchField = field("Branch", branch);
  branchField.hidden = true;
  applies.addEventListener("change", () => { branchField.hidden = applies.value !== "branch"; });
  const save = h("button", { class: "primary", type: "submit", id: "env-save" }, "Save");
  const saveVars = async () => {
    /** @type {Record<string, string>} */
    const vars = {};
    for (const line of text.value.split("\n")) {
      if (!line.trim()) continue;
      const at = line.indexOf("=");
      if (at < 1) throw new Error(`"${line}" is not KEY=value`);
      vars[line.slice(0, at).trim()] = line.slice(at + 1);
    }
    const where = previewsOn ? applies.value : "both";
    /** @type {Record<string, any>} */
    let request = vars;
    if (where === "production" || where === "preview") request = { vars, environments: [where] };
    if (where === "branch") {
      if (!branch.value.trim()) throw new Error("Name the branch whose previews get these variables");
      request = { vars, environments: ["preview"], branch: branch.value.trim() };
    }
    await api("POST", `/api/projects/${enc(project.slug)}/env-vars`, request);
    await reload(); flash("Saved (all or nothing). Redeploy to apply.", "info");
  };
  const where = previewsOn ? [field("Applies to", applies), branchField] : [];
  body.append(h("div", { class: "card" }, table(["Key", "Value", "Applies to", ""], rows)),
    h("div", { class: "card" }, h("h2", {}, "Add or change"),
      form({ class: "row fields" }, saveVars, field("Variables, KEY=value per line", text), ...where, save),
      h("p", { class: "muted" }, "Values are encrypted at rest. A new deployment gets them.",
        previewsOn ? " A preview of a fork's pull request gets none." : "")));
}

/** @type {Tab} */
async function domains(body, project, _base, _id, reload) {
  const { domains } = await api("GET", `/api/projects/${enc(project.slug)}/domains`);
  const rows = domains.map((/** @type {any} */ d) => [h("a", { href: `https://${d.domain}`, target: "_blank", rel: "noopener noreferrer" }, d.domain),
    h("span", {}, badge(d.status), d.lastError ? h("div", { class: "muted" }, d.lastError) : null),
    d.redirectTo ? `→ ${d.redirectTo}` : "serves the site",
    d.certificate ? `${d.certificate.issuer}, until ${new Date(d.certificate.notAfter).toLocaleDateString()}` : "—",
    h("button", { class: "danger", onclick: (/** @type {Event} */ e) => confirm(`Remove ${d.domain}?`) && act(e.target, async () => {
      await api("DELETE", `/api/projects/${enc(project.slug)}/domains/${enc(d.domain)}`); await reload();
    }) }, "Remove")]);
  const name = h("input", { id: "domain-name", class: "grow", placeholder: "www.example.com" });
  const redirect = h("input", { id: "domain-redirect", placeholder: "example.com" });
  const add = h("button", { class: "primary", type: "submit", id: "domain-add" }, "Add domain");
  const addDomain = async () => {
    /** @type {{domain: string, redirectTo?: string}} */
    const body = { domain: name.value.trim() };
    if (redirect.value.trim()) body.redirectTo = redirect.value.trim();
    await api("POST", `/api/projects/${enc(project.slug)}/domains`, body); await reload();
  };
  body.append(h("div", { class: "card" }, table(["Domain", "Status", "Serves", "Certificate", ""], rows, [2])),
    h("div", { class: "card" }, form({ class: "row fields" }, addDomain, field("Domain", name), field("Redirect to (optional)", redirect), add),
      h("p", { class: "muted" }, "Point the name's DNS (A/AAAA or CNAME) at this machine first.")));
}

/** The build settings, in words; the keys are the API's field names. */
const SETTINGS = [["gitUrl", "Git repository URL", "https://…/repo.git"], ["productionBranch", "Production branch", "main"],
  ["installCommand", "Install command", "auto"], ["buildCommand", "Build command", "auto"],
  ["startCommand", "Start command", "empty: a static site"], ["outputDirectory", "Output directory", "auto"]];

/** @type {Tab} */
async function git(body, project, _base, _id, reload) {
  const s = project.settings || {};
  const fields = SETTINGS.map(([key, words, placeholder]) =>
    ({ key, words, input: h("input", { id: `git-${key}`, name: key, class: "grow", value: s[key] || "", placeholder }) }));
  const previews = h("input", { type: "checkbox", id: "git-previews", checked: s.previews || null });
  const save = h("button", { class: "primary", type: "submit" }, "Save settings");
  const saveSettings = async () => {
    /** @type {Record<string, string | boolean | null>} */
    const patch = { previews: previews.checked };
    for (const { key, input } of fields) patch[key] = input.value.trim() || null;
    if (!patch.productionBranch) delete patch.productionBranch;
    await api("PATCH", `/api/projects/${enc(project.slug)}`, patch); await reload(); flash("Settings saved.", "info");
  };
  const secretBox = h("div");
  const rotate = h("button", { id: "webhook-rotate" }, "Create / rotate webhook secret");
  rotate.addEventListener("click", () => act(rotate, async () => {
    const w = await api("POST", `/api/projects/${enc(project.slug)}/webhook-secret`);
    secretBox.replaceChildren(h("div", { class: "secret" }, "Webhook URL: ", h("code", { id: "webhook-url" }, absolute(w.webhookUrl)),
      h("br"), "Secret (shown once): ", h("code", {}, w.secret)));
  }));
  const { deployHooks: hooks } = await api("GET", `/api/projects/${enc(project.slug)}/deploy-hooks`);
  const hookName = h("input", { id: "hook-name", placeholder: "cms" });
  const hookBranch = h("input", { id: "hook-branch", placeholder: s.productionBranch || "main" });
  const addHook = h("button", { type: "submit", id: "hook-create" }, "Create deploy hook");
  const createHook = async () => {
    const created = await api("POST", `/api/projects/${enc(project.slug)}/deploy-hooks`, { name: hookName.value.trim() || "hook", branch: hookBranch.value.trim() || s.productionBranch || "main" });
    await reload();
    // The API's `url` is absolute already; a path would be made absolute on this origin.
    byId("deploy-hook-created").replaceChildren(h("div", { class: "secret" }, `Deploy hook "${created.name}" (shown once; anyone with it can deploy): POST `,
      h("code", { id: "deploy-hook-url" }, absolute(created.url))));
  };
  const hookRows = (hooks || []).map((/** @type {any} */ k) => [k.name, k.branch, ago(k.createdAt), h("button", { class: "danger", onclick: (/** @type {Event} */ e) => act(e.target, async () => {
    await api("DELETE", `/api/projects/${enc(project.slug)}/deploy-hooks/${enc(k.id)}`); await reload(); }) }, "Delete")]);
  body.append(form({ class: "card" }, saveSettings, h("h2", {}, "Build settings"),
      ...fields.map(({ words, input }) => h("div", { class: "row fields" }, field(words, input))),
      h("label", { class: "row", for: "git-previews" }, previews, " Deploy previews of other branches and pull requests"), h("p", {}, save)),
    h("div", { class: "card" }, h("h2", {}, "Deploy on push"), h("p", { class: "muted" }, "Add the webhook URL and secret to your git provider (GitHub, GitLab, Gitea, Forgejo)."), rotate, secretBox),
    h("div", { class: "card" }, h("h2", {}, "Deploy hooks"), table(["Name", "Branch", "Created", ""], hookRows),
      form({ class: "row fields" }, createHook, field("Hook name", hookName), field("Branch", hookBranch), addHook),
      h("div", { id: "deploy-hook-created" })));
}

/** @type {Tab} */
async function previews(body, project, _base, _id, reload) {
  const { previews } = await api("GET", `/api/projects/${enc(project.slug)}/previews`);
  const rows = previews.map((/** @type {any} */ p) => [p.name, p.pullRequest ? `#${p.pullRequest}` : p.branch, h("a", { href: p.url, target: "_blank", rel: "noopener noreferrer" }, p.url), badge(p.state), ago(p.updatedAt),
    h("button", { class: "danger", onclick: (/** @type {Event} */ e) => act(e.target, async () => { await api("DELETE", `/api/projects/${enc(project.slug)}/previews/${enc(p.name)}`); await reload(); }) }, "Tear down")]);
  body.append(h("div", { class: "card" }, table(["Preview", "Branch / PR", "URL", "State", "Updated", ""], rows, [2])));
}
