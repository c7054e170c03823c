// A project's Add-ons tab (issue 34): the PostgreSQL and Redis add-ons it is linked to — kind,
// version, state with its message, memory, disk used of its volume, the variable linked apps
// get and the projects linked — and the form that creates one (admin tokens only; a refusal,
// such as a missing package, shows the API's own message). While an add-on is starting the
// table is asked again every second. `#/projects/<slug>/addons/<addonId>` shows one add-on
// (addon.js).
import { api, enc } from "./api.js";
import { h, field, form, flash, ago, poll, table } from "./ui.js";
import { addonDetail, addonState, diskUse, kindWords, linkWords, projectSlugs } from "./addon.js";

/**
 * The Add-ons tab, or one add-on's page when the address names it.
 * @param {HTMLElement} body
 * @param {any} project
 * @param {string} base
 * @param {string | undefined} addonId
 * @param {() => Promise<void>} reload
 * @returns {Promise<void>}
 */
export async function addons(body, project, base, addonId, reload) {
  if (addonId) return addonDetail(body, project, base, addonId);
  const path = `/api/projects/${enc(project.slug)}/addons`;
  const list = h("div", { id: "addon-list" });
  const refresh = async () => {
    const [{ addons }, slugs] = await Promise.all([api("GET", `${path}?limit=100`), projectSlugs()]);
    if (!list.isConnected && list.childElementCount) return;
    list.replaceChildren(addonTable(addons, slugs, base));
    if (addons.some((/** @type {any} */ a) => a.state === "starting")) {
      poll("addons", 1000, () => refresh().catch((error) => flash(String(error))));
    }
  };
  await refresh();
  body.append(h("section", { class: "card", "aria-labelledby": "addons-title" },
      h("h2", { id: "addons-title" }, "Add-ons"),
      h("p", { class: "muted" }, "PostgreSQL and Redis servers of this project's own. A linked project's production gets the add-on's URL in its variable from its next deployment on."),
      list),
    createForm(path, reload));
}

/**
 * @param {any[]} addons
 * @param {Map<string, string>} slugs
 * @param {string} base
 * @returns {HTMLElement}
 */
function addonTable(addons, slugs, base) {
  const rows = addons.map((a) => [
    h("a", { href: `${base}/addons/${enc(a.id)}`, class: "addon-link", "data-id": a.id, "aria-label": `${kindWords(a.kind)} add-on ${a.id}` },
      h("code", {}, a.id)),
    `${kindWords(a.kind)} ${a.version}${a.kind === "redis" ? ` · ${a.mode}` : ""}`,
    addonState(a),
    `${a.memoryMb} MiB`,
    diskUse(a),
    h("code", {}, a.envName),
    h("span", { class: "addon-links" }, linkWords(a.links, slugs)),
    ago(a.createdAt)]);
  return table(["Add-on", "Kind", "State", "Memory", "Disk", "Variable", "Linked to", "Created"], rows, [7], true);
}

/**
 * The form that creates an add-on; the API answers once it accepts connections.
 * @param {string} path the project's add-ons API path
 * @param {() => Promise<void>} reload
 * @returns {HTMLElement}
 */
function createForm(path, reload) {
  const kind = /** @type {HTMLSelectElement} */ (h("select", { id: "addon-kind" },
    h("option", { value: "postgres" }, "PostgreSQL 15"), h("option", { value: "redis" }, "Redis")));
  const memory = h("input", { id: "addon-memory", type: "number", min: 1, step: 1, class: "number", placeholder: "256" });
  const disk = h("input", { id: "addon-disk", type: "number", min: 1, step: 1, class: "number", placeholder: "1024" });
  // No pattern: what the API refuses is said in its words.
  const envName = h("input", { id: "addon-env", class: "mono", autocomplete: "off", placeholder: "DATABASE_URL" });
  const mode = /** @type {HTMLSelectElement} */ (h("select", { id: "addon-mode" },
    h("option", { value: "persistent" }, "Persistent: saved to disk, never evicts"),
    h("option", { value: "cache" }, "Cache: no persistence, evicts the least recently used")));
  const modeField = field("Redis mode", mode);
  const status = h("p", { class: "muted", id: "addon-create-status", role: "status" });
  const kindChanged = () => {
    modeField.hidden = kind.value !== "redis";
    envName.setAttribute("placeholder", kind.value === "redis" ? "REDIS_URL" : "DATABASE_URL");
  };
  kind.addEventListener("change", kindChanged);
  kind.addEventListener("input", kindChanged);
  kindChanged();
  const create = async () => {
    /** @type {Record<string, string | number>} */
    const addon = { kind: kind.value };
    if (memory.value) addon.memoryMb = Number(memory.value);
    if (disk.value) addon.diskMb = Number(disk.value);
    if (envName.value.trim()) addon.envName = envName.value.trim();
    if (kind.value === "redis") addon.mode = mode.value;
    status.textContent = `Creating the ${kindWords(kind.value)} add-on; the answer comes once it accepts connections…`;
    try {
      const created = await api("POST", path, addon);
      await reload();
      flash(`${kindWords(created.kind)} add-on ${created.id} is ${created.state}; linked apps get ${created.envName} from their next deployment.`, "info");
    } finally { status.textContent = ""; }
  };
  return h("section", { class: "card", "aria-labelledby": "addon-create-title" },
    h("h2", { id: "addon-create-title" }, "Create an add-on"),
    form({ class: "fields", "aria-label": "Create an add-on" }, create,
      h("div", { class: "row fields" }, field("Kind", kind), field("Memory limit (MiB, default 256)", memory),
        field("Disk (MiB, default 1024)", disk), field("Variable name (optional)", envName), modeField,
        h("button", { class: "primary", type: "submit", id: "addon-create" }, "Create add-on")),
      status),
    h("p", { class: "muted" }, "Needs an admin token. The server comes from the machine's packages (postgresql-15, redis-server)."));
}
