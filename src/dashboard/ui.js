// Small DOM helpers: elements built with textContent only (nothing from the API is ever
// parsed as HTML), the flash line, dates and badges.

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

export function flash(message, kind = "error") {
  const box = document.getElementById("flash");
  box.className = kind;
  box.textContent = message || "";
  if (message && kind === "info") setTimeout(() => { if (box.textContent === message) box.textContent = ""; }, 4000);
}

// Runs an action from a button: disables it meanwhile, shows the API's message on failure.
export async function act(button, work) {
  if (button) button.disabled = true;
  try { flash(""); return await work(); }
  catch (error) { flash(error.code ? `${error.code}: ${error.message}` : error.message); return undefined; }
  finally { if (button) button.disabled = false; }
}

export function ago(iso) {
  if (!iso) return "—";
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export function duration(from, to) {
  if (!from || !to) return "—";
  const ms = Date.parse(to) - Date.parse(from);
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function badge(text) { return h("span", { class: "badge " + String(text || "").toLowerCase() }, text || "—"); }

export function table(headers, rows, narrow = []) {
  return h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, headers.map((title, i) => h("th", { class: narrow.includes(i) ? "hide-narrow" : null }, title)))),
    h("tbody", {}, rows.length ? rows.map((cells) => h("tr", {}, cells.map((cell, i) =>
      h("td", { class: narrow.includes(i) ? "hide-narrow" : null }, cell))))
      : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "Nothing yet.")))));
}
