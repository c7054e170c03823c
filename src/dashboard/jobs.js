// A project's Jobs tab (issue 33): one-off runs (runs.js) and cron jobs. The cron jobs'
// table says each job's schedule in its time zone, when it is next due there, how its last
// run went and whether it is enabled; per job: Run now, Enable/Disable, History (its runs)
// and Delete. The form creates one; a refusal (a schedule that does not parse, a time zone
// the daemon does not know) shows the API's own message. The address
// `#/projects/<slug>/jobs/<runId>` shows that run's output.
import { api, enc } from "./api.js";
import { h, field, form, flash, act, ago, badge, table } from "./ui.js";
import { runsSection, runOutput, runTable, runState, reveal } from "./runs.js";

/**
 * The cron job whose history is open, per project (kept while the tab is redrawn).
 * @type {{slug: string, jobId: string} | null}
 */
let openHistory = null;

const CONCURRENCY = [["forbid", "Forbid: skip it while the previous run still runs"],
  ["allow", "Allow: run both"], ["replace", "Replace: stop the previous run"]];
const MISSED = [["skip", "Skip: record one skipped run"], ["runOnce", "Run once at start"]];

/** The browser's time zone, the form's default. */
function browserZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"; } catch { return "UTC"; }
}

/**
 * A due time as the job's zone reads it (`2026-03-08 03:00 America/New_York`), and how soon.
 * @param {{at: string, atUtc: string}} due
 * @param {string} zone
 * @returns {HTMLElement}
 */
function dueTime(due, zone) {
  const local = due.at.slice(0, 16).replace("T", " ");
  const minutes = Math.round((Date.parse(due.atUtc) - Date.now()) / 60000);
  const soon = minutes < 1 ? "in under a minute" : minutes < 120 ? `in ${minutes} min` : `in ${Math.round(minutes / 60)} h`;
  return h("time", { datetime: due.atUtc, class: "next-due" }, `${local} ${zone}`, h("span", { class: "muted" }, ` (${soon})`));
}

/**
 * The Jobs tab.
 * @param {HTMLElement} body
 * @param {any} project
 * @param {string} base
 * @param {string | undefined} runId the run whose output is shown
 * @param {() => Promise<void>} reload
 * @returns {Promise<void>}
 */
export async function jobs(body, project, base, runId, reload) {
  if (openHistory && openHistory.slug !== project.slug) openHistory = null;
  const [runs, output, cron] = await Promise.all([runsSection(project, base, runId),
    runId ? runOutput(runId, reload) : Promise.resolve(null), cronSection(project, base, runId, reload)]);
  body.append(runs);
  // The output shows under the list it was chosen from: a cron run under its open history.
  const place = output && cron.querySelector(`#cron-history[data-job="${CSS.escape(output.dataset.job || "")}"]`);
  if (output && place) place.after(output);
  else if (output) body.append(output);
  body.append(cron);
  reveal(output);
}

/**
 * The Cron jobs section: the jobs, the open history, and the form that creates one.
 * @param {any} project
 * @param {string} base
 * @param {string | undefined} runId
 * @param {() => Promise<void>} reload
 * @returns {Promise<HTMLElement>}
 */
async function cronSection(project, base, runId, reload) {
  const path = `/api/projects/${enc(project.slug)}/cron-jobs`;
  const { cronJobs } = await api("GET", `${path}?limit=100`);
  const open = openHistory && cronJobs.find((/** @type {any} */ j) => j.id === openHistory?.jobId);
  const rows = cronJobs.map((/** @type {any} */ j) => {
    const last = j.lastRun;
    const opened = open && open.id === j.id;
    return [h("code", { class: "cron-name" }, j.name),
      h("span", {}, h("code", {}, j.schedule), " in ", j.timezone),
      j.nextRuns.length ? dueTime(j.nextRuns[0], j.timezone) : h("span", { class: "muted" }, j.enabled ? "not due" : "not while disabled"),
      last ? h("span", {}, runState(last.state), " ", h("a", { href: `${base}/jobs/${enc(last.id)}`, "aria-label": `Output of ${j.name}'s last run` }, ago(last.createdAt)))
        : h("span", { class: "muted" }, "never run"),
      h("span", { class: "cron-enabled" }, badge(j.enabled ? "enabled" : "disabled")),
      h("div", { class: "row actions" },
        h("button", { class: "run-now", "data-job": j.name, onclick: (/** @type {Event} */ e) => act(e.target, async () => {
          const accepted = await api("POST", `${path}/${enc(j.id)}/runs`);
          openHistory = { slug: project.slug, jobId: j.id };
          location.hash = `${base}/jobs/${enc(accepted.runId)}`;
        }) }, "Run now"),
        h("button", { class: "toggle", "data-job": j.name, onclick: (/** @type {Event} */ e) => act(e.target, async () => {
          await api("PATCH", `${path}/${enc(j.id)}`, { enabled: !j.enabled });
          await reload();
          flash(`${j.name} is ${j.enabled ? "disabled: it runs only when asked" : "enabled"}.`, "info");
        }) }, j.enabled ? "Disable" : "Enable"),
        h("button", { class: "history", "data-job": j.name, "aria-expanded": opened ? "true" : "false", onclick: (/** @type {Event} */ e) => act(e.target, async () => {
          openHistory = opened ? null : { slug: project.slug, jobId: j.id };
          await reload();
        }) }, opened ? "Hide history" : "History"),
        h("button", { class: "danger delete", "data-job": j.name, onclick: (/** @type {Event} */ e) => confirm(`Delete the cron job ${j.name}? Its runs stay in the history for a while.`) && act(e.target, async () => {
          await api("DELETE", `${path}/${enc(j.id)}`);
          if (opened) openHistory = null;
          await reload();
          flash(`${j.name} deleted.`, "info");
        }) }, "Delete"))];
  });
  const section = h("section", { class: "card", "aria-labelledby": "cron-jobs" },
    h("h2", { id: "cron-jobs" }, "Cron jobs"),
    table(["Name", "Schedule", "Next due", "Last run", "Enabled", ""], rows, [], true));
  if (open) {
    const { runs } = await api("GET", `${path}/${enc(open.id)}/runs?limit=20`);
    section.append(h("div", { id: "cron-history", "data-job": open.id },
      h("h3", {}, "History of ", h("code", {}, open.name)), runTable(runs, base, runId)));
  }
  section.append(createForm(path, reload));
  return section;
}

/**
 * The form that creates a cron job.
 * @param {string} path the project's cron-jobs API path
 * @param {() => Promise<void>} reload
 * @returns {HTMLElement}
 */
function createForm(path, reload) {
  const name = h("input", { id: "cron-name", required: true, pattern: "[a-z0-9]+(-[a-z0-9]+)*", maxlength: 63, placeholder: "nightly-report", autocomplete: "off" });
  const schedule = h("input", { id: "cron-schedule", required: true, placeholder: "*/5 * * * *", class: "mono", autocomplete: "off" });
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const zone = h("input", { id: "cron-timezone", required: true, value: browserZone(), list: "cron-zones", autocomplete: "off" });
  const command = h("input", { id: "cron-command", class: "grow mono", required: true, placeholder: "npm run report", autocomplete: "off" });
  const concurrency = h("select", { id: "cron-concurrency" }, CONCURRENCY.map(([value, words]) => h("option", { value }, words)));
  const missed = h("select", { id: "cron-missed" }, MISSED.map(([value, words]) => h("option", { value }, words)));
  const timeout = h("input", { id: "cron-timeout", type: "number", min: 1, step: 1, class: "number", placeholder: "3600" });
  const create = async () => {
    /** @type {Record<string, string | number>} */
    const job = { name: name.value.trim(), schedule: schedule.value.trim(), timezone: zone.value.trim(), command: command.value,
      concurrency: concurrency.value, missed: missed.value };
    if (timeout.value) job.timeoutS = Number(timeout.value);
    const created = await api("POST", path, job);
    await reload();
    const next = created.nextRuns[0];
    flash(`Cron job ${created.name} created${next ? `; next due ${next.at.slice(0, 16).replace("T", " ")} ${created.timezone}` : ""}.`, "info");
  };
  return h("div", {}, h("h3", {}, "Create a cron job"),
    form({ class: "fields", "aria-label": "Create a cron job" }, create,
      h("div", { class: "row fields" }, field("Name", name), field("Schedule", schedule), field("Time zone", zone),
        h("datalist", { id: "cron-zones" }, zones.map((z) => h("option", { value: z })))),
      h("p", { class: "muted" }, "Schedule: five fields, minute hour day-of-month month day-of-week (", h("code", {}, "*/5 * * * *"),
        " is every five minutes), or @hourly, @daily, @weekly, @monthly, @yearly; the times are in the time zone."),
      h("div", { class: "row fields" }, field("Command", command)),
      h("div", { class: "row fields" }, field("When the previous run still runs", concurrency), field("Due times missed while the daemon was down", missed),
        field("Timeout (seconds, optional)", timeout), h("button", { class: "primary", type: "submit", id: "cron-create" }, "Create cron job"))));
}
