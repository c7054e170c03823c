// One add-on's page (`#/projects/<slug>/addons/<addonId>`): its settings and state (asked
// again every second while it is starting, e.g. restoring), the projects linked to it (link
// another by its name, unlink), its credentials — fetched only when "Show credentials" is
// pressed, since reading them leaves an audit entry — its backups (backups.js), changes
// (disk, memory, PITR: `PATCH`; a version upgrade into a new add-on, and the rollback of one),
// and delete, which asks for the add-on's id typed again (`?confirm=`) and keeps its backups.
import { api, enc } from "./api.js";
import { h, field, form, flash, act, ago, poll, size, table, navigate } from "./ui.js";
import { backupsSection } from "./backups.js";

/** An add-on's state as a badge, in words: green when it serves, amber starting, red failed. */
const STATE_CLASS = /** @type {Record<string, string>} */ ({ running: "ok", starting: "pending", failed: "failed" });

/** @param {any} addon @returns {HTMLElement} its state, with its message when it has one */
export function addonState(addon) {
  return h("span", { class: "addon-state" }, h("span", { class: `badge ${STATE_CLASS[addon.state] || ""}` }, addon.state),
    addon.message ? h("span", { class: "muted addon-message" }, " ", addon.message) : null);
}

/** @param {string} kind @returns {string} */
export function kindWords(kind) { return kind === "postgres" ? "PostgreSQL" : kind === "redis" ? "Redis" : kind; }

/** @param {any} addon @returns {HTMLElement} the disk used of its volume, as a bar and in words */
export function diskUse(addon) {
  const total = addon.diskMb * 1024 * 1024;
  const percent = total ? Math.min(100, Math.round((addon.diskUsedBytes / total) * 100)) : 0;
  const words = `${size(addon.diskUsedBytes)} of ${addon.diskMb} MiB (${percent} %)`;
  return h("span", { class: "disk" }, h("meter", { min: 0, max: total, value: addon.diskUsedBytes, high: total * 0.9,
    "aria-label": `Disk used: ${words}` }), h("span", { class: "disk-words" }, words));
}

/**
 * The projects by id, to name linked projects by their slugs.
 * @returns {Promise<Map<string, string>>}
 */
export async function projectSlugs() {
  const { projects } = await api("GET", "/api/projects?limit=200");
  return new Map(projects.map((/** @type {any} */ p) => [p.id, p.slug]));
}

/** @param {string[]} links @param {Map<string, string>} slugs @returns {string} */
export function linkWords(links, slugs) {
  return links.length ? links.map((id) => slugs.get(id) || id).join(", ") : "no project";
}


/**
 * @param {HTMLElement} body
 * @param {any} project
 * @param {string} base
 * @param {string} addonId
 * @returns {Promise<void>}
 */
export async function addonDetail(body, project, base, addonId) {
  const path = `/api/addons/${enc(addonId)}`;
  const [addon, slugs] = await Promise.all([api("GET", path), projectSlugs()]);
  const settings = h("section", { class: "card", "aria-labelledby": "addon-title" });
  const links = h("section", { class: "card", "aria-labelledby": "addon-links-title" });
  const change = h("section", { class: "card", "aria-labelledby": "addon-change-title" });
  /** Draws the parts that change with the add-on; polls while it is starting. @param {any} now */
  const draw = (now) => {
    settings.replaceChildren(...settingsCard(now, slugs));
    links.replaceChildren(...linksCard(now, slugs, path, draw));
    change.replaceChildren(...changeCard(now, path, base, draw));
    if (now.state === "starting") poll("addon", 1000, () => refreshAddon());
  };
  const refreshAddon = async () => {
    if (!settings.isConnected) return;
    try { draw(await api("GET", path)); } catch (error) { flash(String(error)); }
  };
  draw(addon);
  const backups = await backupsSection(addon, base, refreshAddon);
  body.append(h("p", {}, h("a", { href: `${base}/addons` }, "← All add-ons of ", project.slug)),
    settings, links, credentialsCard(path), backups, change, deleteCard(addon, path, base));
}

/** @param {any} addon @param {Map<string, string>} slugs @returns {HTMLElement[]} */
function settingsCard(addon, slugs) {
  return [h("h2", { id: "addon-title" }, `${kindWords(addon.kind)} add-on `, h("code", {}, addon.id)),
    h("dl", { class: "facts" },
      h("dt", {}, "State"), h("dd", { id: "addon-state" }, addonState(addon)),
      h("dt", {}, "Version"), h("dd", {}, `${kindWords(addon.kind)} ${addon.version}`),
      ...(addon.kind === "redis" ? [h("dt", {}, "Mode"), h("dd", {}, addon.mode === "cache" ? "cache: no persistence, evicts the least recently used" : "persistent")] : []),
      h("dt", {}, "Memory limit"), h("dd", {}, `${addon.memoryMb} MiB`),
      h("dt", {}, "Disk"), h("dd", { id: "addon-disk-used" }, diskUse(addon)),
      h("dt", {}, "Variable"), h("dd", {}, h("code", {}, addon.envName)),
      h("dt", {}, "Address"), h("dd", {}, h("code", {}, `${addon.host}:${addon.port}`)),
      h("dt", {}, "Owner"), h("dd", {}, slugs.get(addon.projectId) || addon.projectId),
      ...(addon.upgradedFrom ? [h("dt", {}, "Upgraded from"), h("dd", {}, h("code", {}, addon.upgradedFrom))] : []),
      ...(addon.upgradedTo ? [h("dt", {}, "Upgraded into"), h("dd", {}, h("code", {}, addon.upgradedTo))] : []),
      h("dt", {}, "Created"), h("dd", {}, ago(addon.createdAt)))];
}

/**
 * The linked projects, each with Unlink, and the form that links another by its name.
 * @param {any} addon
 * @param {Map<string, string>} slugs
 * @param {string} path
 * @param {(addon: any) => void} draw
 * @returns {HTMLElement[]}
 */
function linksCard(addon, slugs, path, draw) {
  const rows = addon.links.map((/** @type {string} */ id) => {
    const slug = slugs.get(id) || id;
    return [h("span", { class: "link-slug" }, slug),
      h("button", { class: "danger unlink", "data-project": slug, "aria-label": `Unlink ${slug}`, onclick: (/** @type {Event} */ e) =>
        act(e.target, async () => {
          draw(await api("DELETE", `${path}/links/${enc(id)}`));
          document.getElementById("link-project")?.focus();
          flash(`${slug} is unlinked: its next deployment no longer gets ${addon.envName}.`, "info");
        }) }, "Unlink")];
  });
  const others = [...slugs.entries()].filter(([id]) => !addon.links.includes(id)).map(([, slug]) => slug).sort();
  const slug = h("input", { id: "link-project", required: true, list: "link-projects", autocomplete: "off", placeholder: others[0] || "blog" });
  const link = async () => {
    const name = slug.value.trim();
    draw(await api("PUT", `${path}/links/${enc(name)}`));
    document.getElementById("link-project")?.focus();
    flash(`${name} is linked: its next deployment gets ${addon.envName}.`, "info");
  };
  return [h("h2", { id: "addon-links-title" }, "Linked projects"),
    h("p", { class: "muted" }, `Linked to ${linkWords(addon.links, slugs)}. A linked project's production gets ${addon.envName} and may connect, from its next deployment on (runs and cron jobs at once).`),
    table(["Project", ""], rows),
    form({ class: "row fields", "aria-label": "Link a project" }, link,
      field("Project name", slug), h("datalist", { id: "link-projects" }, others.map((s) => h("option", { value: s }))),
      h("button", { type: "submit", id: "link-add" }, "Link project"))];
}

/**
 * Credentials, fetched only when asked for (each read is audited), with a copy of the URL.
 * @param {string} path
 * @returns {HTMLElement}
 */
function credentialsCard(path) {
  const box = h("div", { id: "credentials" });
  const show = h("button", { id: "credentials-show", "aria-expanded": "false", "aria-controls": "credentials" }, "Show credentials");
  show.addEventListener("click", () => act(show, async () => {
    if (show.getAttribute("aria-expanded") === "true") {
      box.replaceChildren();
      show.setAttribute("aria-expanded", "false");
      show.textContent = "Show credentials";
      return;
    }
    const c = await api("GET", `${path}/credentials`);
    const url = h("code", { id: "credentials-url" }, c.url);
    const copy = h("button", { id: "credentials-copy" }, "Copy URL");
    copy.addEventListener("click", () => act(copy, async () => {
      try { await navigator.clipboard.writeText(c.url); flash("URL copied.", "info"); }
      catch {
        const range = document.createRange();
        range.selectNodeContents(url);
        getSelection()?.removeAllRanges();
        getSelection()?.addRange(range);
        flash("The browser refused the clipboard: the URL is selected, copy it with Ctrl+C.", "info");
      }
    }));
    box.replaceChildren(h("div", { class: "secret" }, h("dl", { class: "facts" },
      h("dt", {}, "URL"), h("dd", {}, url, " ", copy),
      h("dt", {}, "User"), h("dd", {}, c.user || "—"),
      h("dt", {}, "Password"), h("dd", {}, h("code", { id: "credentials-password" }, c.password)),
      h("dt", {}, "Host and port"), h("dd", {}, h("code", {}, `${c.host}:${c.port}`)),
      h("dt", {}, "Database"), h("dd", {}, c.database || "—"))));
    show.setAttribute("aria-expanded", "true");
    show.textContent = "Hide credentials";
  }));
  return h("section", { class: "card", "aria-labelledby": "credentials-title" },
    h("h2", { id: "credentials-title" }, "Credentials"),
    h("p", { class: "muted" }, "Fetched only when you ask: every read leaves an entry in the audit log. Linked apps get the URL without asking."),
    show, box);
}

/**
 * Changes: a larger disk (online), another memory limit (a restart), PITR on or off; a
 * version upgrade into a new add-on (whose page it goes to), and the rollback of one.
 * @param {any} addon
 * @param {string} path
 * @param {string} base
 * @param {(addon: any) => void} draw
 * @returns {HTMLElement[]}
 */
function changeCard(addon, path, base, draw) {
  const disk = /** @type {HTMLInputElement} */ (h("input", { id: "addon-change-disk", type: "number", min: addon.diskMb, max: 1048576, step: 1, value: addon.diskMb, required: true }));
  const memory = /** @type {HTMLInputElement} */ (h("input", { id: "addon-change-memory", type: "number", min: 64, max: 65536, step: 1, value: addon.memoryMb, required: true }));
  const pitr = /** @type {HTMLInputElement} */ (h("input", { id: "addon-change-pitr", type: "checkbox", checked: addon.pitr }));
  const save = async () => {
    /** @type {Record<string, any>} */
    const patch = {};
    if (Number(disk.value) !== addon.diskMb) patch.diskMb = Number(disk.value);
    if (Number(memory.value) !== addon.memoryMb) patch.memoryMb = Number(memory.value);
    if (addon.kind === "postgres" && pitr.checked !== addon.pitr) patch.pitr = pitr.checked;
    if (!Object.keys(patch).length) { flash("Nothing changed.", "info"); return; }
    draw(await api("PATCH", path, patch));
    flash(patch.memoryMb || patch.pitr !== undefined ? "Changed: the server restarted with the new settings." : "The disk grew; the server kept running.", "info");
  };
  const upgrade = h("button", { id: "addon-upgrade", disabled: addon.state !== "running" || Boolean(addon.upgradedTo) }, "Upgrade to the newest version installed");
  upgrade.addEventListener("click", () => act(upgrade, async () => {
    const into = await api("POST", `${path}/upgrade`, {});
    navigate(`${base}/addons/${enc(into.id)}`, `Upgrading into ${into.id}: ${addon.id} takes no writes until the links moved.`);
  }));
  const rollback = addon.upgradedFrom ? h("button", { id: "addon-rollback", class: "danger" }, `Roll back to ${addon.upgradedFrom}`) : null;
  rollback?.addEventListener("click", () => act(rollback, async () => {
    await api("POST", `${path}/rollback`, {});
    navigate(`${base}/addons/${enc(addon.upgradedFrom)}`, `Rolling back: the links move back to ${addon.upgradedFrom}.`);
  }));
  return [h("h2", { id: "addon-change-title" }, "Change"),
    form({ class: "row fields", "aria-label": "Change the add-on's settings" }, save,
      field("Disk (MiB; grows online, never shrinks)", disk), field("Memory limit (MiB; restarts it)", memory),
      ...(addon.kind === "postgres" ? [field("Point-in-time recovery", pitr)] : []),
      h("button", { type: "submit", id: "addon-save" }, "Save changes")),
    h("p", { class: "muted" }, "An upgrade makes a new add-on at the newest version installed: this one stops taking writes, its data is backed up, restored there and counted, the linked apps restart with the new URL, and this one is kept stopped for a rollback."),
    h("p", { class: "row" }, upgrade, rollback)];
}

/**
 * Delete, confirmed by typing the add-on's id (the API's `?confirm=`).
 * @param {any} addon
 * @param {string} path
 * @param {string} base
 * @returns {HTMLElement}
 */
function deleteCard(addon, path, base) {
  const typed = /** @type {HTMLInputElement} */ (h("input", { id: "addon-delete-confirm", autocomplete: "off", class: "mono grow", placeholder: addon.id }));
  const remove = /** @type {HTMLButtonElement} */ (h("button", { class: "danger", type: "submit", id: "addon-delete", disabled: true }, "Delete add-on and its data"));
  typed.addEventListener("input", () => { remove.disabled = typed.value.trim() !== addon.id; });
  const destroy = async () => {
    const gone = await api("DELETE", `${path}?confirm=${enc(typed.value.trim())}`);
    navigate(`${base}/addons`, `Add-on ${addon.id} is deleted; its backups are kept until ${gone.backupsKeptUntil}.`);
  };
  return h("section", { class: "card", "aria-labelledby": "addon-delete-title" },
    h("h2", { id: "addon-delete-title" }, "Delete"),
    h("p", {}, "Takes a final backup and proves it, then deletes the server and its data (a failed backup deletes nothing). Its backups are kept for a while, restorable into a new add-on. Linked apps lose it at their next deployment."),
    form({ class: "row fields", "aria-label": "Delete the add-on" }, destroy,
      field(`Type the add-on's id (${addon.id}) to confirm`, typed), remove));
}
