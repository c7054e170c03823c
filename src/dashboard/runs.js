// Runs (issue 33): the Jobs tab's "Run a command" form and table of the project's runs, and
// one run's output — followed live over its log stream while it runs (then its final state
// and exit code), fetched once it has ended — with Cancel while it runs. Cron jobs' history
// (jobs.js) lists its runs with the same rows and shows them with the same output card.
import { api, enc, followStream } from "./api.js";
import { h, field, form, act, describe, ago, duration, table } from "./ui.js";

/** @type {(() => void) | null} */
let stopFollowing = null;
window.addEventListener("hashchange", () => { if (stopFollowing) { stopFollowing(); stopFollowing = null; } });

/** The run whose output was shown last: a newly chosen one is scrolled to and focused. */
let lastShown = "";

/** What started a run, in words. */
const TRIGGER = /** @type {Record<string, string>} */ ({ oneoff: "one-off", cron: "cron job", release: "release command" });

/** @param {string} trigger @returns {string} */
export function triggerWords(trigger) { return TRIGGER[trigger] || trigger; }

/** @param {string} state @returns {boolean} whether a run in this state may still change */
export function unfinished(state) { return state === "queued" || state === "running"; }

/**
 * A run's state in words ("timed out"), styled by its class: never colour alone.
 * @param {string | null | undefined} state
 * @returns {HTMLSpanElement}
 */
export function runState(state) {
  return h("span", { class: "badge " + String(state || "") }, state ? state.replace(/_/g, " ") : "—");
}

/**
 * A table of runs; each run's link shows its output on this tab.
 * @param {any[]} runs
 * @param {string} base the project's address (`#/projects/<slug>`)
 * @param {string | undefined} selected the run shown now
 * @returns {HTMLDivElement}
 */
export function runTable(runs, base, selected) {
  const rows = runs.map((r) => [
    h("a", { href: `${base}/jobs/${enc(r.id)}`, class: "mono run-link", "data-id": r.id, "aria-current": r.id === selected ? "true" : null,
      "aria-label": `Output of run ${r.id}` }, r.id.slice(0, 12)),
    runState(r.state), triggerWords(r.trigger), h("code", {}, r.command),
    r.exitCode === null || r.exitCode === undefined ? "—" : String(r.exitCode),
    ago(r.startedAt || r.createdAt), duration(r.startedAt, r.finishedAt)]);
  return table(["Run", "State", "Trigger", "Command", "Exit code", "Started", "Duration"], rows, [2, 6], true);
}

/**
 * The Runs section: the form that starts a one-off run, and the project's recent runs.
 * @param {any} project
 * @param {string} base
 * @param {string | undefined} selected
 * @returns {Promise<HTMLElement>}
 */
export async function runsSection(project, base, selected) {
  const { runs } = await api("GET", `/api/projects/${enc(project.slug)}/runs?limit=20`);
  const command = h("input", { id: "run-command", class: "grow mono", required: true, placeholder: "npm run migrate", autocomplete: "off" });
  const timeout = h("input", { id: "run-timeout", type: "number", min: 1, step: 1, class: "number", placeholder: "3600" });
  const submit = h("button", { class: "primary", type: "submit", id: "run-submit" }, "Run");
  const start = async () => {
    /** @type {{command: string, timeoutS?: number}} */
    const request = { command: command.value };
    if (timeout.value) request.timeoutS = Number(timeout.value);
    const accepted = await api("POST", `/api/projects/${enc(project.slug)}/runs`, request);
    location.hash = `${base}/jobs/${enc(accepted.runId)}`;
  };
  return h("section", { class: "card", "aria-labelledby": "runs" },
    h("h2", { id: "runs" }, "Runs"),
    form({ class: "row fields", "aria-label": "Run a command" }, start,
      field("Run a command", command), field("Timeout (seconds, optional)", timeout), submit),
    h("p", { class: "muted" }, "It runs once as ", h("code", {}, "sh -c"), " in a fresh sandbox from the live deployment's build, with the project's variables and its /data."),
    h("h3", {}, "Recent runs"), runTable(runs, base, selected));
}

/**
 * Polls a run until it has ended (its log stream may end just before its record does).
 * @param {string} runId
 * @returns {Promise<any>}
 */
async function ended(runId) {
  for (let tries = 0; ; tries++) {
    const run = await api("GET", `/api/runs/${enc(runId)}`);
    if (!unfinished(run.state) || tries >= 40) return run;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * One run's output card: what ran, its state and exit code, Cancel while it runs, and its
 * output (followed live, or fetched). When a followed run ends, `reload` shows it final.
 * @param {string} runId
 * @param {() => Promise<void>} reload
 * @returns {Promise<HTMLElement>}
 */
export async function runOutput(runId, reload) {
  if (stopFollowing) { stopFollowing(); stopFollowing = null; }
  const run = await api("GET", `/api/runs/${enc(runId)}`);
  const live = unfinished(run.state);
  const logs = h("div", { class: "logs", id: "run-logs", role: "log", "aria-live": "polite", "aria-label": "Output", tabindex: 0 });
  const phase = h("span", { class: "muted", id: "run-log-state" }, live ? "" : "finished");
  const cancel = live ? h("button", { class: "danger", id: "run-cancel" }, "Cancel run") : null;
  if (cancel) cancel.addEventListener("click", () => act(cancel, async () => {
    await api("POST", `/api/runs/${enc(runId)}/cancel`); await reload();
  }));
  const exit = run.exitCode === null || run.exitCode === undefined ? (live ? "not yet" : "none") : String(run.exitCode);
  // A queued run shown before it started: its state is asked again once its output flows.
  const stateCell = h("dd", { id: "run-state" }, runState(run.state));
  let shown = run.state;
  let asking = false;
  const refreshState = () => {
    if (shown !== "queued" || asking) return;
    asking = true;
    api("GET", `/api/runs/${enc(runId)}`).then((now) => {
      shown = now.state;
      stateCell.replaceChildren(runState(now.state));
    }).catch(() => {}).finally(() => { asking = false; });
  };
  const card = h("section", { class: "card", id: "run-output", "data-job": run.jobId, tabindex: -1, "aria-labelledby": "run-output-title" },
    h("div", { class: "row" }, h("h2", { class: "grow", id: "run-output-title" }, "Output of run ", h("code", {}, run.id)), phase, cancel),
    h("dl", { class: "facts" },
      h("dt", {}, "Command"), h("dd", {}, h("code", {}, run.command)),
      h("dt", {}, "State"), stateCell,
      h("dt", {}, "Exit code"), h("dd", { id: "run-exit" }, exit),
      h("dt", {}, "Trigger"), h("dd", {}, triggerWords(run.trigger), run.scheduledAt ? ` (due ${new Date(run.scheduledAt).toLocaleString()})` : ""),
      h("dt", {}, "Started"), h("dd", {}, run.startedAt ? `${ago(run.startedAt)} · ran ${duration(run.startedAt, run.finishedAt)}` : "not yet"),
      ...(run.message ? [h("dt", {}, "Message"), h("dd", { id: "run-message" }, run.message)] : [])),
    logs);
  /** @param {any} line */
  const append = (line) => {
    const stick = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 8;
    logs.append(h("div", { class: line.stream }, `[${line.stream}] ${line.message}`));
    if (stick) logs.scrollTop = logs.scrollHeight;
  };
  if (live) {
    stopFollowing = followStream(`/api/runs/${enc(runId)}/logs/stream`, (type, data) => {
      if (type === "log") { append(data); refreshState(); }
      else if (type === "end") ended(runId).then(() => reload()).catch((error) => { phase.textContent = describe(error); });
    }, (state, error) => {
      if (state === "live") refreshState();
      phase.textContent = state === "live" ? "following live" : state === "ended" ? "finished"
        : state === "error" ? describe(error) : error ? `reconnecting… (${describe(error)})` : "reconnecting…";
    });
  } else {
    let since = 0;
    for (let page = 0; page < 20; page++) {
      const got = await api("GET", `/api/runs/${enc(runId)}/logs?since=${since}&limit=5000`);
      got.logs.forEach(append);
      since = got.nextSince;
      if (!got.hasMore) break;
    }
    if (!logs.childElementCount) logs.append(h("div", { class: "system" }, "(no output)"));
  }
  return card;
}

/**
 * Brings a newly chosen run's output into view and moves the focus there (not when the same
 * run's card is drawn again, e.g. once it ends).
 * @param {HTMLElement | null} card
 */
export function reveal(card) {
  const id = card ? card.querySelector("h2 code")?.textContent || "" : "";
  if (card && id !== lastShown) {
    card.scrollIntoView({ block: "start" });
    card.focus({ preventScroll: true });
  }
  lastShown = id;
}
