// Small DOM helpers: elements built with textContent only (nothing from the API is ever
// parsed as HTML), labelled form fields, the flash line, dates and badges.

/** @typedef {Node | string | number | null | undefined | false} Child */

/**
 * An element with attributes (`on…` ones are listeners) and children (text or nodes).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, any> | null} [attrs]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/**
 * A form field: its label in words, tied to the input by `for` (the input needs an id).
 * @param {string} text
 * @param {HTMLElement} input
 * @returns {HTMLLabelElement}
 */
export function field(text, input) {
  return h("label", { class: "field", for: input.id || null }, h("span", { class: "label" }, text), input);
}

/**
 * A form whose submission (its submit button, or Enter in a field) runs `work` through act().
 * @param {Record<string, any>} attrs
 * @param {() => Promise<unknown>} work
 * @param {...(Child | Child[])} children
 * @returns {HTMLFormElement}
 */
export function form(attrs, work, ...children) {
  return h("form", { ...attrs, onsubmit: (/** @type {SubmitEvent} */ event) => {
    event.preventDefault();
    act(event.submitter, work);
  } }, ...children);
}

/** @param {string} id @returns {HTMLElement} an element the page always has */
export function byId(id) {
  const element = document.getElementById(id);
  if (!element) throw new Error(`the page has no #${id}`);
  return element;
}

/**
 * The flash line under the header: an error stays until the next action, news goes after 4 s.
 * @param {string} message
 * @param {"error" | "info"} [kind]
 */
export function flash(message, kind = "error") {
  const box = byId("flash");
  box.className = kind;
  box.textContent = message || "";
  if (message && kind === "error") box.scrollIntoView({ block: "nearest" });
  if (message && kind === "info") setTimeout(() => { if (box.textContent === message) box.textContent = ""; }, 4000);
}

/**
 * What a failure says: the API's `CODE: message`, or the error's own message.
 * @param {unknown} error
 * @returns {string}
 */
export function describe(error) {
  if (error && typeof error === "object" && "message" in error) {
    const code = "code" in error && error.code ? `${error.code}: ` : "";
    return code + String(error.message);
  }
  return String(error);
}

/**
 * Runs an action from a button: disables it meanwhile, shows the API's message on failure
 * (in the flash line, and next to the button so it is seen where the form is).
 * @template T
 * @param {EventTarget | null} target the button (or an event's target)
 * @param {() => Promise<T>} work
 * @returns {Promise<T | undefined>}
 */
export async function act(target, work) {
  const button = target instanceof HTMLButtonElement ? target : null;
  const place = button && button.parentElement;
  const inline = place && place.querySelector(":scope > .form-error");
  if (inline) inline.remove();
  if (button) button.disabled = true;
  try { flash(""); return await work(); }
  catch (error) {
    const message = describe(error);
    flash(message);
    if (place && place.isConnected) place.append(h("span", { class: "form-error" }, message));
    return undefined;
  }
  finally { if (button) button.disabled = false; }
}

/** @param {string | null | undefined} iso @returns {string} */
export function ago(iso) {
  if (!iso) return "—";
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

/** @param {string | null | undefined} from @param {string | null | undefined} to @returns {string} */
export function duration(from, to) {
  if (!from || !to) return "—";
  const ms = Date.parse(to) - Date.parse(from);
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** @param {string | null | undefined} text @returns {HTMLSpanElement} */
export function badge(text) { return h("span", { class: "badge " + String(text || "").toLowerCase() }, text || "—"); }

/**
 * A table in a scroll box; columns listed in `narrow` hide on small screens. A `stack` table
 * shows each row as a block of labelled lines on small screens instead of scrolling sideways.
 * @param {string[]} headers
 * @param {Child[][]} rows
 * @param {number[]} [narrow]
 * @param {boolean} [stack]
 * @returns {HTMLDivElement}
 */
export function table(headers, rows, narrow = [], stack = false) {
  return h("div", { class: "scroll" }, h("table", { class: stack ? "stack" : null },
    h("thead", {}, h("tr", {}, headers.map((title, i) => h("th", { class: narrow.includes(i) ? "hide-narrow" : null }, title)))),
    h("tbody", {}, rows.length ? rows.map((cells) => h("tr", {}, cells.map((cell, i) =>
      h("td", { class: narrow.includes(i) ? "hide-narrow" : null, "data-label": stack ? headers[i] : null }, cell))))
      : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "Nothing yet.")))));
}

/** Pending polls by name; the address changing stops them all, so a page left stops asking. */
const polls = new Map();
window.addEventListener("hashchange", () => { for (const timer of polls.values()) clearTimeout(timer); polls.clear(); });

/**
 * Runs `work` once after `ms`, replacing a poll of the same name that is still pending (a
 * page drawn again never polls twice); `work` schedules the next one while something runs.
 * @param {string} name
 * @param {number} ms
 * @param {() => unknown} work
 */
export function poll(name, ms, work) {
  clearTimeout(polls.get(name));
  polls.set(name, setTimeout(() => { polls.delete(name); work(); }, ms));
}

/** @param {number} bytes @returns {string} a size in words (`3.2 MiB`) */
export function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = bytes / 1024, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/**
 * Goes to `hash` and says `message` there (after the address change, which clears the flash).
 * @param {string} hash
 * @param {string} message
 */
export function navigate(hash, message) {
  window.addEventListener("hashchange", () => flash(message, "info"), { once: true });
  location.hash = hash;
}
