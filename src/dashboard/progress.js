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
 * Draws `status` (the API's provisioning status) into `box`, and polls while it runs.
 * @param {HTMLElement} box
 * @param {any} status
 */
export function showProgress(box, status) {
  const running = status.status === "provisioning_in_progress";
  const steps = (status.steps || []).map((/** @type {any} */ s) => h("li", { class: `step ${s.state}` }, badge(s.state), " ", s.name));
  const done = (status.steps || []).filter((/** @type {any} */ s) => s.state === "succeeded" || s.state === "skipped").length;
  const percent = running ? status.progressPercentage : status.status === "provisioning_complete" ? 100 : Math.round((100 * done) / Math.max((status.steps || []).length, 1));
  const words = running ? `${status.currentStep} · ${percent} % · ${left(status.estimatedTimeRemaining)}`
    : status.status.replace("provisioning_", "").replace("_", " ");
  box.replaceChildren(
    h("div", { class: "row" }, h("label", { for: "deploy-progress", class: "grow" }, "Progress: ", h("span", { id: "progress-words" }, words))),
    h("progress", { id: "deploy-progress", max: 100, value: percent, "aria-valuetext": words, "data-eta-ms": running ? status.estimatedTimeRemaining : 0 }),
    h("ol", { class: "steps", "aria-label": "Steps" }, steps));
  if (running && box.isConnected) {
    poll("progress", 2000, async () => {
      if (!box.isConnected) return;
      const now = await api("GET", `/api/provisioning/${enc(status.provisioningId)}/status`).catch(() => null);
      if (now) showProgress(box, now);
    });
  }
}
