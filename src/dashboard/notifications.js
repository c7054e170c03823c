// The Notifications page: subscriptions that post events to a URL. The events are the ones
// the API accepts (`EventKind` in src/notifications/mod.rs; it takes no wildcard), offered as
// checkboxes with the deployment events chosen, so the form's defaults are a valid request.
import { api, enc } from "./api.js";
import { h, field, form, byId, act, ago, table } from "./ui.js";

/** [name, words, chosen by default] for every event the API knows. */
const EVENTS = /** @type {const} */ ([
  ["deployment.started", "A deployment started", true],
  ["deployment.succeeded", "A deployment went live", true],
  ["deployment.failed", "A deployment failed", true],
  ["deployment.canceled", "A deployment was canceled", true],
  ["app.crashed", "An app crashed", false],
  ["app.slept", "An idle app was put to sleep", false],
  ["app.woke", "A sleeping app woke up", false],
  ["app.wake_failed", "A sleeping app did not wake up", false],
  ["certificate.failed", "A certificate could not be issued", false],
  ["domain.active", "A domain became active", false],
]);

/** @param {(...nodes: Node[]) => void} show */
export async function notificationsPage(show) {
  const { notifications } = await api("GET", "/api/notifications");
  const url = h("input", { id: "hook-url", class: "grow", placeholder: "https://hooks.example.com/slipway" });
  const format = h("select", { id: "hook-format" },
    h("option", { value: "json" }, "JSON, signed"), h("option", { value: "slack" }, "Slack-compatible text"));
  const boxes = EVENTS.map(([name, words, chosen]) =>
    h("input", { type: "checkbox", id: `event-${name}`, value: name, checked: chosen }));
  const events = h("fieldset", { class: "events" }, h("legend", {}, "Events"),
    boxes.map((box, i) => h("label", { for: box.id }, box, ` ${EVENTS[i][1]} `, h("code", {}, EVENTS[i][0]))));
  const add = h("button", { class: "primary", type: "submit", id: "hook-subscribe" }, "Subscribe");
  const subscribe = async () => {
    /** @type {string[]} */
    const chosen = boxes.filter((box) => box.checked).map((box) => box.value);
    const created = await api("POST", "/api/notifications", { url: url.value.trim(), events: chosen, format: format.value });
    await notificationsPage(show);
    byId("hook-secret").replaceChildren(h("div", { class: "secret" }, "Signing secret (shown once): ", h("code", {}, created.secret)));
  };
  const rows = notifications.map((/** @type {any} */ n) => [n.url, n.events.join(", "), n.format, ago(n.createdAt),
    h("button", { class: "danger", onclick: (/** @type {Event} */ e) => act(e.target, async () => {
      await api("DELETE", `/api/notifications/${enc(n.id)}`); await notificationsPage(show);
    }) }, "Delete")]);
  show(h("h1", {}, "Notifications"),
    form({ class: "card" }, subscribe, h("h2", {}, "Subscribe"),
      h("div", { class: "row fields" }, field("Webhook URL", url), field("Format", format)), events,
      h("div", { class: "row" }, add), h("div", { id: "hook-secret" })),
    h("div", { class: "card" }, table(["URL", "Events", "Format", "Created", ""], rows, [2, 3])));
}
