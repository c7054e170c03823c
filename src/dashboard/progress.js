// A running deployment's progress (issue 37): its steps as a progress bar with the ETA the
// status object gives (`progressPercentage`, `estimatedTimeRemaining` in ms), kept live from
// the log stream's status events and a poll of the status every 2 s while it runs.
import { api, enc } from "./api.js";
import { h, badge, poll } from "./ui.js";

/** @param {number} ms @returns {string} */
function left(ms) {
  const s = Math.round(ms / 1000);
  return s < 60 ? `about ${s} s left` : `about ${Math.round(s / 60)} min left`;
}

/**
 * Draws `status` (the API's provisioning status): the bar and its words into `box`, each step
 * with its state into `steps`; polls while the run goes on.
 * @param {HTMLElement} box
 * @param {HTMLElement} steps
 * @param {any} status
 */
export function showProgress(box, steps, status) {
  const running = status.status === "provisioning_in_progress";
  /** @type {any[]} */
  const all = status.steps || [];
  const done = all.filter((s) => s.state === "succeeded" || s.state === "skipped").length;
  const percent = running ? status.progressPercentage : status.status === "provisioning_complete" ? 100 : Math.round((100 * done) / Math.max(all.length, 1));
  const words = running ? `${status.currentStep} · ${percent} % · ${left(status.estimatedTimeRemaining)}`
    : status.status.replace("provisioning_", "").replace("_", " ");
  box.replaceChildren(
    h("label", { for: "deploy-progress" }, "Progress: ", h("span", { id: "progress-words" }, words)),
    h("progress", { id: "deploy-progress", max: 100, value: percent, "aria-valuetext": words, "data-eta-ms": running ? status.estimatedTimeRemaining : 0 }));
  steps.replaceChildren(...all.map((s) => h("span", {}, badge(s.state), " ", s.name)));
  if (running && box.isConnected) {
    poll("progress", 2000, async () => {
      if (!box.isConnected) return;
      const now = await api("GET", `/api/provisioning/${enc(status.provisioningId)}/status`).catch(() => null);
      if (now) showProgress(box, steps, now);
    });
  }
}
