// An add-on's backups (issue 34, "Backups, proven by restoring them"): the list, newest
// first, each with its state in words (running → verifying → ok | failed), size, when it was
// taken and proven, the counts its proof found (rows per table, or keys per Redis database)
// in an expandable list, and the error of a failed one. "Back up now" starts one and "Verify
// again" proves a good one again; the list is asked again every second until every backup's
// state is final. "Restore…" opens a form: into a new add-on, or in place (confirmed by
// typing the add-on's id), and the add-on's state is followed while it restores.
import { api, enc } from "./api.js";
import { h, field, form, flash, act, ago, poll, size, table, navigate } from "./ui.js";

const STATE_CLASS = /** @type {Record<string, string>} */ ({ running: "pending", verifying: "pending", ok: "ok", failed: "failed" });
const STATE_WORDS = /** @type {Record<string, string>} */ ({
  running: "running", verifying: "verifying", ok: "ok", failed: "failed" });

/** @param {string} state @returns {boolean} whether a backup in this state may still change */
function unfinished(state) { return state === "running" || state === "verifying"; }

/**
 * The Backups section of an add-on's page.
 * @param {any} addon
 * @param {string} base the project's address
 * @param {() => Promise<void>} refreshAddon draws the add-on's state again (and polls it)
 * @returns {Promise<HTMLElement>}
 */
export async function backupsSection(addon, base, refreshAddon) {
  const path = `/api/addons/${enc(addon.id)}/backups`;
  const list = h("div", { id: "backup-list" });
  const status = h("p", { class: "muted", id: "backup-status", role: "status" });
  const restorePanel = h("div", { id: "restore-panel" });
  /** The backups whose counts are open, kept while the list is drawn again. */
  const open = new Set();
  /** @type {string | null} the backup whose end is announced */
  let watched = null;
  const refresh = async () => {
    if (list.childElementCount && !list.isConnected) return;
    const { backups } = await api("GET", `${path}?limit=50`);
    // Keep the keyboard's place: the same control in the new rows gets the focus back.
    const focused = document.activeElement instanceof HTMLElement && list.contains(document.activeElement)
      ? document.activeElement.dataset.focus : undefined;
    list.replaceChildren(backupTable(backups, open, { verify, restore }));
    if (focused) /** @type {HTMLElement | null} */ (list.querySelector(`[data-focus="${CSS.escape(focused)}"]`))?.focus();
    const followed = watched && backups.find((/** @type {any} */ b) => b.id === watched);
    if (followed && !unfinished(followed.state)) {
      status.textContent = followed.state === "ok" ? `Backup ${followed.id} is ok: a throw-away restore proved it.`
        : `Backup ${followed.id} failed: ${followed.error || "no reason given"}`;
      watched = null;
    } else if (followed) status.textContent = `Backup ${followed.id} is ${followed.state}…`;
    if (backups.some((/** @type {any} */ b) => unfinished(b.state))) {
      poll("backups", 1000, () => refresh().catch((error) => flash(String(error))));
    }
  };
  /** @param {EventTarget | null} button @param {any} backup */
  const verify = (button, backup) => act(button, async () => {
    const again = await api("POST", `${path}/${enc(backup.id)}/verify`);
    watched = again.id;
    await refresh();
  });
  /** @param {any} backup */
  const restore = (backup) => {
    restorePanel.replaceChildren(restoreForm(addon, backup, base, refreshAddon, () => restorePanel.replaceChildren()));
    restorePanel.querySelector("input")?.focus();
  };
  const now = h("button", { class: "primary", id: "backup-now" }, "Back up now");
  now.addEventListener("click", () => act(now, async () => {
    const started = await api("POST", path);
    watched = started.id;
    await refresh();
  }));
  await refresh();
  return h("section", { class: "card", "aria-labelledby": "backups-title" },
    h("div", { class: "row" }, h("h2", { class: "grow", id: "backups-title" }, "Backups"), now),
    h("p", { class: "muted" }, "A backup is listed ok only once a restore into a throw-away server held the same counts. The newest good ones are kept; failed ones for a day."),
    status, list, restorePanel);
}

/**
 * @param {any[]} backups
 * @param {Set<string>} open the backups whose counts are shown
 * @param {{verify: (button: EventTarget | null, backup: any) => unknown, restore: (backup: any) => void}} actions
 * @returns {HTMLElement}
 */
function backupTable(backups, open, actions) {
  const rows = backups.map((b) => [
    h("code", { class: "backup-id", "data-id": b.id }, b.id),
    h("span", { class: "backup-state" }, h("span", { class: `badge ${STATE_CLASS[b.state] || ""}` }, STATE_WORDS[b.state] || b.state),
      b.error ? h("div", { class: "backup-error" }, b.error) : null),
    b.state === "running" ? "—" : size(b.bytes),
    h("span", {}, ago(b.at), h("span", { class: "muted" }, b.trigger === "schedule" ? " · scheduled" : " · by hand")),
    b.verifiedAt ? ago(b.verifiedAt) : h("span", { class: "muted" }, unfinished(b.state) ? "not yet" : "never"),
    counts(b, open),
    b.state === "ok" ? h("div", { class: "row actions" },
      h("button", { class: "verify", "data-focus": `verify-${b.id}`, "aria-label": `Verify backup ${b.id} again`,
        onclick: (/** @type {Event} */ e) => actions.verify(e.target, b) }, "Verify again"),
      h("button", { class: "restore", "data-focus": `restore-${b.id}`, "aria-label": `Restore backup ${b.id}…`,
        onclick: () => actions.restore(b) }, "Restore…")) : ""]);
  return table(["Backup", "State", "Size", "Taken", "Verified", "Counts", ""], rows, [], true);
}

/**
 * What the proof counted, summed up, expandable to each table or database.
 * @param {any} backup
 * @param {Set<string>} open
 * @returns {HTMLElement}
 */
function counts(backup, open) {
  const tables = backup.check ? Object.entries(backup.check.tables) : null;
  if (!tables) return h("span", { class: "muted" }, unfinished(backup.state) ? "not yet" : "—");
  const redis = backup.kind === "rdb";
  const total = tables.reduce((sum, [, n]) => sum + Number(n), 0);
  const summary = redis ? `${total} key(s) in ${tables.length} database(s)` : `${total} row(s) in ${tables.length} table(s)`;
  const details = h("details", { class: "counts", open: open.has(backup.id) || null },
    h("summary", { "data-focus": `counts-${backup.id}` }, summary),
    tables.length ? h("ul", {}, tables.map(([name, n]) => h("li", {}, h("code", {}, name), `: ${n}`)))
      : h("p", { class: "muted" }, redis ? "No keys." : "No tables."));
  details.addEventListener("toggle", () => { if (details.open) open.add(backup.id); else open.delete(backup.id); });
  return details;
}

/**
 * Restore a good backup: into a new add-on (not linked), or in place once the id is typed.
 * @param {any} addon
 * @param {any} backup
 * @param {string} base
 * @param {() => Promise<void>} refreshAddon
 * @param {() => void} close
 * @returns {HTMLElement}
 */
function restoreForm(addon, backup, base, refreshAddon, close) {
  const fresh = h("input", { type: "radio", name: "restore-target", id: "restore-new", value: "new", checked: true });
  const inPlace = h("input", { type: "radio", name: "restore-target", id: "restore-in-place", value: "in-place" });
  const typed = /** @type {HTMLInputElement} */ (h("input", { id: "restore-confirm", autocomplete: "off", class: "mono grow", placeholder: addon.id }));
  const confirmField = field(`Type the add-on's id (${addon.id}) to replace its data`, typed);
  const targetChanged = () => { confirmField.hidden = !inPlace.checked; };
  fresh.addEventListener("change", targetChanged);
  inPlace.addEventListener("change", targetChanged);
  targetChanged();
  const go = async () => {
    const target = inPlace.checked ? "in-place" : "new";
    if (target === "in-place" && typed.value.trim() !== addon.id) {
      throw new Error(`Type ${addon.id} to confirm replacing this add-on's data.`);
    }
    const into = await api("POST", `/api/addons/${enc(addon.id)}/restore`, { backupId: backup.id, target });
    close();
    if (target === "new") {
      navigate(`${base}/addons/${enc(into.id)}`, `Restoring ${backup.id} into the new add-on ${into.id} (not linked: link it where you want it).`);
    } else {
      flash(`Restoring ${backup.id} in place; the data is replaced once the restored copy is proven.`, "info");
      await refreshAddon();
    }
  };
  return form({ class: "card restore", "aria-labelledby": "restore-title" }, go,
    h("h3", { id: "restore-title" }, "Restore ", h("code", {}, backup.id)),
    h("fieldset", { class: "events" }, h("legend", {}, "Restore into"),
      h("label", { for: "restore-new" }, fresh, " A new add-on with the same settings, not linked"),
      h("label", { for: "restore-in-place" }, inPlace, " This add-on, replacing its data")),
    h("div", { class: "row fields" }, confirmField),
    h("div", { class: "row" }, h("button", { class: "primary", type: "submit", id: "restore-submit" }, "Restore"),
      h("button", { type: "button", id: "restore-cancel", onclick: close }, "Cancel")));
}
