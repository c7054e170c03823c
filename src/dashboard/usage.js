// A project's Usage tab (issue 37): requests and errors, latency, memory and CPU against the
// limits, and builds, over the last hour, day or week, from GET …/usage/history; redrawn
// every minute while shown.
import { api, enc } from "./api.js";
import { h, poll, table, ago } from "./ui.js";
import { lineChart, mib } from "./charts.js";

/** @type {Record<string, {label: string, step: "minute" | "hour", ms: number}>} */
const RANGES = {
  hour: { label: "Last hour", step: "minute", ms: 3600e3 },
  day: { label: "Last day", step: "minute", ms: 86400e3 },
  week: { label: "Last week", step: "hour", ms: 7 * 86400e3 },
};

/** The range chosen last (kept while the tab is left and shown again). */
let chosen = "hour";

/** @param {number} n @returns {string} */
const count = (n) => (n >= 10000 ? `${Math.round(n / 1000)}k` : String(Math.round(n * 10) / 10));
/** @param {number} ms @returns {string} */
const millis = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms * 10) / 10} ms`);
/** @param {number} cores @returns {string} */
const cores = (cores) => `${cores < 0.1 ? cores.toFixed(3) : cores.toFixed(2)} CPU`;

/**
 * The charts of one history.
 * @param {any} history the API's UsageHistory
 * @param {number} from @param {number} to @param {number} step
 * @returns {HTMLElement[]}
 */
export function usageCharts(history, from, to, step) {
  /** @type {any[]} */
  const points = history.points;
  const times = points.map((p) => Date.parse(p.at));
  const per = history.step === "hour" ? "hour" : "minute";
  const base = { times, from, to, step };
  const last = points[points.length - 1];
  /** @type {string[]} */
  const types = [...new Set(points.flatMap((p) => p.processTypes.map((/** @type {any} */ t) => t.processType)))];
  const memorySeries = [{ name: "Memory (all)", cls: "memory", values: points.map((p) => p.memoryBytes) }];
  if (types.length > 1) {
    types.forEach((type, i) => memorySeries.push({ name: `Memory (${type})`, cls: `type${i % 3}`,
      values: points.map((p) => p.processTypes.find((/** @type {any} */ t) => t.processType === type)?.memoryBytes ?? null) }));
  }
  return [
    lineChart({ ...base, id: "chart-requests", title: `Requests and errors per ${per}`, format: count, series: [
      { name: "Requests", cls: "requests", values: points.map((p) => p.requestsTotal) },
      { name: "Errors (5xx)", cls: "errors", values: points.map((p) => p.requests["5xx"]) }] }),
    lineChart({ ...base, id: "chart-latency", title: "Latency (time to first byte)", format: millis, series: [
      { name: "p50", cls: "p50", values: points.map((p) => p.latencyP50Ms) },
      { name: "p95", cls: "p95", values: points.map((p) => p.latencyP95Ms) }] }),
    lineChart({ ...base, id: "chart-memory", title: "Memory", format: mib, scale: 1048576, limit: last ? last.memoryLimitBytes : null, series: memorySeries }),
    lineChart({ ...base, id: "chart-cpu", title: "CPU", format: cores, limit: history.cpuLimitCores, series: [
      { name: "CPU used", cls: "cpu", values: points.map((p) => p.cpuCores) }] }),
  ];
}

/** @type {import("./project.js").Tab} */
export async function usage(body, project) {
  const box = h("div", { id: "usage-charts", "aria-live": "polite" });
  const builds = h("div", { id: "usage-builds" });
  const buttons = Object.entries(RANGES).map(([key, range]) => h("button", { type: "button", class: "range", "data-range": key,
    "aria-pressed": String(key === chosen), onclick: () => { chosen = key; draw(); } }, range.label));
  body.append(h("div", { class: "row ranges", role: "group", "aria-label": "Time range" }, buttons),
    h("section", { class: "card", "aria-label": "Usage charts" }, box),
    h("section", { class: "card", "aria-labelledby": "builds-title" }, h("h2", { id: "builds-title" }, "Builds in this range"), builds));
  async function draw() {
    for (const button of buttons) button.setAttribute("aria-pressed", String(button.dataset.range === chosen));
    const range = RANGES[chosen];
    const to = Date.now(), from = to - range.ms, step = range.step === "hour" ? 3600e3 : 60e3;
    const query = `step=${range.step}&from=${enc(new Date(from).toISOString())}&to=${enc(new Date(to).toISOString())}`;
    const history = await api("GET", `/api/projects/${enc(project.slug)}/usage/history?${query}`);
    box.dataset.query = query;
    box.replaceChildren(...usageCharts(history, from, to, step));
    if (!history.points.some((/** @type {any} */ p) => p.memoryBytes !== null)) {
      box.prepend(h("p", { class: "muted", id: "usage-unmeasured" },
        "Memory and CPU are measured from the app's cgroups: none in this range (a static site, nothing live, or sandbox mode none)."));
    }
    const rows = history.points.flatMap((/** @type {any} */ p) => p.builds.map((/** @type {any} */ b) =>
      [ago(p.at), h("code", {}, b.provisioningId.slice(0, 12)), `${b.durationSeconds.toFixed(1)} s`, b.result]));
    builds.replaceChildren(table(["When", "Run", "Duration", "Result"], rows));
    if (box.isConnected) poll("usage", 60000, draw);
  }
  await draw();
}
