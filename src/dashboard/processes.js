// A project's Processes tab: the live deployment's process types (`web` and the Procfile's
// others) with their settings and running instances, from GET …/formation; each type's form
// scales it with PATCH …/formation, and a refusal (too many instances, not enough memory)
// shows the API's message next to the form. The inputs leave the ranges to the API, so
// what it refuses is said in its words.
import { api, enc } from "./api.js";
import { h, field, form, flash, act, ago, table } from "./ui.js";

/** How a deploy replaces a type's instances, in words. */
const DEPLOY = /** @type {Record<string, string>} */ ({
  overlap: "Overlap: new instances start before the old ones stop",
  replace: "Replace: old instances stop before the new ones start",
});

/** An instance's state as a badge: green when it serves, amber starting, red restarting. */
const STATE_CLASS = /** @type {Record<string, string>} */ ({ running: "ok", starting: "pending", restarting: "failed" });

/** @param {number} bytes @returns {string} */
function mebibytes(bytes) {
  const mib = bytes / (1024 * 1024);
  return `${mib < 10 ? mib.toFixed(1) : Math.round(mib)} MiB`;
}

/**
 * The Processes tab.
 * @param {HTMLElement} body
 * @param {any} project
 * @param {string} _base
 * @param {string | undefined} _id
 * @param {() => Promise<void>} reload
 * @returns {Promise<void>}
 */
export async function processes(body, project, _base, _id, reload) {
  const path = `/api/projects/${enc(project.slug)}/formation`;
  const formation = await api("GET", path);
  const refresh = h("button", { id: "processes-refresh" }, "Refresh");
  refresh.addEventListener("click", () => act(refresh, reload));
  const names = Object.keys(formation.types || {});
  const heading = h("div", { class: "row" }, h("h2", { class: "grow", id: "processes" }, "Processes"), refresh);
  if (!formation.deploymentId || !names.length) {
    body.append(h("section", { class: "card", "aria-labelledby": "processes" }, heading,
      h("p", { class: "muted", id: "processes-none" },
        "Nothing runs: this project has no live server deployment (nothing deployed yet, or a static site, which has no processes).")));
    return;
  }
  body.append(h("section", { "aria-labelledby": "processes" }, heading,
    h("p", { class: "muted" }, "Process types of the live deployment ", h("code", {}, formation.deploymentId),
      ". Scaling changes only the type you scale, without a rebuild; the other types keep running untouched."),
    names.map((name) => processType(path, name, formation.types[name], reload))));
}

/**
 * One type: its settings, its instances, and the form that scales it.
 * @param {string} path the formation's API path
 * @param {string} name
 * @param {any} type the API's ProcessTypeView
 * @param {() => Promise<void>} reload
 * @returns {HTMLElement}
 */
function processType(path, name, type, reload) {
  const running = [...type.running].sort((/** @type {any} */ a, /** @type {any} */ b) =>
    Number(a.instance.split(".").pop()) - Number(b.instance.split(".").pop()));
  // On a cluster, each instance's node ("this machine" for local ones).
  const clustered = running.some((/** @type {any} */ i) => i.node);
  const rows = running.map((/** @type {any} */ i) => [h("code", {}, i.instance),
    h("span", { class: `badge ${STATE_CLASS[i.state] || ""}` }, i.state),
    ...(clustered ? [i.node ? h("code", { class: "node" }, i.node) : h("span", { class: "muted" }, "this machine")] : []),
    i.memoryBytes === null || i.memoryBytes === undefined ? h("span", { class: "muted" }, "not measured")
      : `${mebibytes(i.memoryBytes)} of ${type.memoryMb} MiB`,
    String(i.restarts), ago(i.startedAt)]);
  const instances = /** @type {HTMLInputElement} */ (h("input", { id: `instances-${name}`, type: "number", min: 0, step: 1,
    required: true, value: String(type.instances), class: "number" }));
  const memory = /** @type {HTMLInputElement} */ (h("input", { id: `memory-${name}`, type: "number", min: 1, step: 1,
    required: true, value: String(type.memoryMb), class: "number" }));
  const scale = h("button", { class: "primary", type: "submit", id: `scale-${name}` }, "Scale");
  const submit = async () => {
    /** @type {{instances?: number, memoryMb?: number}} */
    const change = {};
    const count = Number(instances.value), limit = Number(memory.value);
    if (count !== type.instances) change.instances = count;
    if (limit !== type.memoryMb) change.memoryMb = limit;
    if (!Object.keys(change).length) throw new Error(`${name} already runs ${type.instances} instance(s) of ${type.memoryMb} MiB`);
    await api("PATCH", path, { [name]: change });
    await reload();
    flash(`${name}: ${count} instance(s) of ${limit} MiB.`, "info");
  };
  const notRunning = type.instances - running.length;
  return h("section", { class: "card process", id: `process-${name}`, "aria-labelledby": `process-${name}-name` },
    h("h3", { id: `process-${name}-name` }, name),
    h("dl", { class: "facts" },
      h("dt", {}, "Command"), h("dd", {}, h("code", {}, type.command)),
      h("dt", {}, "Instances"), h("dd", { class: "instances" }, `${type.instances} asked, ${running.length} running`),
      h("dt", {}, "Memory limit"), h("dd", {}, `${type.memoryMb} MiB per instance`),
      h("dt", {}, "CPU"), h("dd", {}, `${type.cpus} per instance`),
      h("dt", {}, "Deploy"), h("dd", {}, DEPLOY[type.deploy] || type.deploy)),
    type.instances === 0 ? h("p", { class: "muted" }, "Scaled to 0: no instances run.")
      : table(clustered ? ["Instance", "State", "Node", "Memory used", "Restarts", "Started"]
        : ["Instance", "State", "Memory used", "Restarts", "Started"], rows, [clustered ? 4 : 3]),
    notRunning > 0 ? h("p", { class: "muted" }, `${notRunning} of ${type.instances} instance(s) not running.`) : null,
    form({ class: "row fields", "aria-label": `Scale ${name}` }, submit,
      field("Instances", instances), field("Memory limit (MiB)", memory), scale));
}
