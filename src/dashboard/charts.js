// Charts drawn by the dashboard itself (issue 37): inline SVG lines over time, their axes and
// legend in HTML (readable at 390 px), each with a text summary the SVG is labelled by and its
// data as a table. Nothing from another host; the API's history is the only input.
import { h } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 1000, H = 200;

/**
 * An SVG element.
 * @param {string} tag
 * @param {Record<string, string | number>} attrs
 * @param {...Node} children
 * @returns {SVGElement}
 */
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

/** @typedef {{name: string, cls: string, values: (number | null)[]}} Series */
/**
 * @typedef {object} Chart
 * @property {string} id the figure's id (`chart-requests`)
 * @property {string} title
 * @property {number[]} times each point's start (ms)
 * @property {number} from the range's start (ms)
 * @property {number} to the range's end (ms)
 * @property {number} step a point's length (ms): points further apart are not joined
 * @property {Series[]} series
 * @property {number | null} [limit] a level drawn as a dashed line (memory, CPU)
 * @property {(value: number) => string} format a value in words with its unit
 * @property {number} [scale] the unit the axis's top is round in (1048576 for MiB)
 */

/** @param {number} value @returns {number} a round top for an axis holding value */
function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

/** @param {number} ms @param {number} span @returns {string} a time on an axis */
export function timeLabel(ms, span) {
  const date = new Date(ms);
  if (span > 36 * 3600e3) return date.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

/**
 * The SVG path of one series: a run of points joined, a gap (no sample) left open; a point
 * alone is drawn as a dash across its step.
 * @param {Chart} chart @param {(number | null)[]} values @param {number} top
 * @returns {{d: string, points: number}}
 */
function path(chart, values, top) {
  const span = Math.max(chart.to - chart.from, 1);
  const x = (/** @type {number} */ ms) => (((ms - chart.from) / span) * W).toFixed(1);
  /** @type {{time: number, y: string}[][]} */
  const runs = [];
  let last = -Infinity, points = 0;
  values.forEach((value, i) => {
    if (value === null || value === undefined) { last = -Infinity; return; }
    const point = { time: chart.times[i], y: (H - (value / top) * H).toFixed(1) };
    if (point.time - last > chart.step * 1.5) runs.push([point]); else runs[runs.length - 1].push(point);
    last = point.time;
    points++;
  });
  const d = runs.map((run) => run.length === 1
    ? `M${x(run[0].time)},${run[0].y} L${x(run[0].time + chart.step)},${run[0].y}`
    : run.map((p, i) => `${i ? "L" : "M"}${x(p.time + chart.step / 2)},${p.y}`).join(" ")).join(" ");
  return { d, points };
}

/** @param {Series} series @param {(v: number) => string} format @returns {string} */
function sayHighest(series, format) {
  const known = /** @type {number[]} */ (series.values.filter((v) => v !== null && v !== undefined));
  if (!known.length) return `${series.name}: no data`;
  return `${series.name}: highest ${format(Math.max(...known))}, latest ${format(known[known.length - 1])}`;
}

/**
 * A line chart with its summary and data table.
 * @param {Chart} chart
 * @returns {HTMLElement}
 */
export function lineChart(chart) {
  const known = chart.series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
  const scale = chart.scale || 1;
  const top = niceMax(Math.max(0, ...(/** @type {number[]} */ (known)), chart.limit || 0) / scale) * scale;
  const span = chart.to - chart.from;
  const lines = chart.series.map((series) => {
    const { d, points } = path(chart, series.values, top);
    return svg("path", { d: d || "M0,0", class: `line ${series.cls}`, "data-points": points, "vector-effect": "non-scaling-stroke" });
  });
  const grid = [0.5, 1].map((share) => svg("line", { x1: 0, x2: W, y1: H - share * H, y2: H - share * H, class: "grid", "vector-effect": "non-scaling-stroke" }));
  const limit = chart.limit ? [svg("line", { x1: 0, x2: W, y1: H - (chart.limit / top) * H, y2: H - (chart.limit / top) * H, class: "limit", "vector-effect": "non-scaling-stroke" })] : [];
  const summary = `${chart.title}, ${timeLabel(chart.from, span)} to ${timeLabel(chart.to, span)}. `
    + chart.series.map((s) => sayHighest(s, chart.format)).join("; ")
    + (chart.limit ? `; limit ${chart.format(chart.limit)}.` : ".");
  const descId = `${chart.id}-summary`;
  // The table's rows are made when it is first opened (a day of minutes is 1,440 of them).
  const rows = () => chart.times.map((time, i) => h("tr", {},
    h("td", {}, h("time", { datetime: new Date(time).toISOString() }, timeLabel(time, span))),
    chart.series.map((s) => h("td", { "data-value": s.values[i] ?? "" }, s.values[i] === null || s.values[i] === undefined ? "—" : chart.format(/** @type {number} */ (s.values[i]))))));
  const body = h("tbody", {}, chart.times.length ? null : h("tr", {}, h("td", { colspan: chart.series.length + 1, class: "muted" }, "No samples in this range yet.")));
  const fill = (/** @type {Event} */ event) => {
    const details = /** @type {HTMLDetailsElement} */ (event.currentTarget);
    if (details.open && !body.childElementCount) body.replaceChildren(...rows());
  };
  return h("figure", { class: "chart", id: chart.id },
    h("figcaption", {}, h("span", { class: "chart-title" }, chart.title),
      h("span", { class: "legend" }, chart.series.map((s) => h("span", { class: `key ${s.cls}` }, s.name)),
        chart.limit ? h("span", { class: "key limit" }, `limit ${chart.format(chart.limit)}`) : null)),
    h("div", { class: "plot" },
      h("span", { class: "y top", "aria-hidden": "true" }, chart.format(top)),
      svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-labelledby": descId, focusable: "false" },
        ...grid, ...limit, ...lines),
      h("span", { class: "y bottom", "aria-hidden": "true" }, chart.format(0))),
    h("div", { class: "x", "aria-hidden": "true" }, h("span", {}, timeLabel(chart.from, span)), h("span", {}, timeLabel(chart.to, span))),
    h("p", { class: "chart-summary", id: descId }, summary),
    h("details", { ontoggle: fill }, h("summary", {}, `${chart.title}: data table`),
      h("div", { class: "scroll" }, h("table", { class: "chart-data" },
        h("thead", {}, h("tr", {}, h("th", {}, "Time"), chart.series.map((s) => h("th", {}, s.name)))),
        body))));
}

/**
 * A small line without axes (the projects list): the text beside it says the same.
 * @param {(number | null)[]} values
 * @param {string} label what the line shows, in words
 * @returns {SVGElement}
 */
export function sparkline(values, label) {
  const top = niceMax(Math.max(0, ...(/** @type {number[]} */ (values.filter((v) => v !== null)))));
  const n = Math.max(values.length - 1, 1);
  const d = values.map((v, i) => `${i ? "L" : "M"}${((i / n) * 100).toFixed(1)},${(20 - ((v || 0) / top) * 18 - 1).toFixed(1)}`).join(" ");
  return svg("svg", { viewBox: "0 0 100 20", preserveAspectRatio: "none", class: "spark", role: "img", "aria-label": label },
    svg("title", {}, document.createTextNode(label)),
    svg("path", { d: d || "M0,19 L100,19", class: "line requests", "vector-effect": "non-scaling-stroke" }));
}

/** @param {number} bytes @returns {string} */
export function mib(bytes) {
  const value = bytes / 1048576;
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} MiB`;
}
