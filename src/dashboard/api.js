// The dashboard's only way to the daemon: the public API with the signed-in token, which
// lives in this tab's sessionStorage (never in a URL or a cookie).
const KEY = "slipway-token";

export const session = {
  /** @returns {string} */
  get token() { return sessionStorage.getItem(KEY) || ""; },
  /** @param {string} token */
  signIn(token) { sessionStorage.setItem(KEY, token); },
  signOut() { sessionStorage.removeItem(KEY); },
};

// A refused call: the HTTP status and the envelope's `{"error": {"code", "message"}}`.
export class ApiError extends Error {
  /** @param {number} status @param {string} code @param {string} message */
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

/**
 * One API call; JSON in and out, or a raw body (`Blob`) with its content type. A refusal
 * throws an ApiError carrying the API's code and message.
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @param {string} [contentType]
 * @returns {Promise<any>} the JSON answer (its shape is the API's, docs/api.md)
 */
export async function api(method, path, body, contentType) {
  /** @type {Record<string, string>} */
  const headers = { "Authorization": "Bearer " + session.token };
  let payload;
  if (body instanceof Blob) { payload = body; headers["Content-Type"] = contentType || "application/gzip"; }
  else if (body !== undefined) { payload = JSON.stringify(body); headers["Content-Type"] = "application/json"; }
  const response = await fetch(path, { method, headers, body: payload, cache: "no-store" });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const error = data && data.error;
    throw new ApiError(response.status, error ? error.code : "HTTP_" + response.status,
      error ? error.message : response.status + " " + response.statusText);
  }
  return data;
}

export const enc = encodeURIComponent;

/**
 * An absolute address on this origin for a URL the API gives (absolute already, or a path).
 * @param {string} url
 * @returns {string}
 */
export function absolute(url) { return new URL(url, location.origin).href; }

/** @typedef {(phase: "live" | "ended" | "error" | "reconnecting", error?: Error) => void} StreamState */

/**
 * Follows a deployment's log stream; see followStream.
 * @param {string} deploymentId
 * @param {(type: string, data: any) => void} onEvent
 * @param {StreamState} onState
 * @returns {() => void}
 */
export function followLogs(deploymentId, onEvent, onState) {
  return followStream(`/api/deployments/${enc(deploymentId)}/logs/stream`, onEvent, onState);
}

// Follows a log stream — a deployment's or a run's (`/api/runs/{id}/logs/stream`), both with
// the same rules — as server-sent events over fetch, so the token goes in a header: calls
// onEvent(type, data) for `log`, `status` and `end`; reconnects after a drop from the last
// line seen. Returns a function that stops following.
/**
 * @param {string} path the stream's API path
 * @param {(type: string, data: any) => void} onEvent
 * @param {StreamState} onState
 * @returns {() => void}
 */
export function followStream(path, onEvent, onState) {
  let stopped = false, retry = 500;
  /** @type {string | null} */
  let lastId = null;
  /** @type {AbortController | null} */
  let controller = null;
  /** @type {Error | undefined} why the last connection ended, when it failed */
  let dropped;
  async function connect() {
    while (!stopped) {
      controller = new AbortController();
      try {
        /** @type {Record<string, string>} */
        const headers = { "Authorization": "Bearer " + session.token, "Accept": "text/event-stream" };
        if (lastId !== null) headers["Last-Event-ID"] = String(lastId);
        const response = await fetch(path,
          { headers, signal: controller.signal, cache: "no-store" });
        if (!response.ok) {
          const data = await response.json().catch(() => null);
          throw new ApiError(response.status, data?.error?.code || "HTTP_" + response.status, data?.error?.message || response.statusText);
        }
        if (!response.body) throw new Error("the log stream has no body");
        onState("live");
        retry = 500;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
            let type = "message", data = "", id = null;
            for (const line of block.split("\n")) {
              if (line.startsWith("event: ")) type = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
              else if (line.startsWith("id: ")) id = line.slice(4);
            }
            if (id !== null) lastId = id;
            let parsed = null;
            try { parsed = JSON.parse(data); } catch { parsed = data; }
            onEvent(type, parsed);
            if (type === "end") { stopped = true; onState("ended"); return; }
          }
        }
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.status < 500 && error.status !== 429) {
          onState("error", error); return;
        }
        dropped = error instanceof Error ? error : new Error(String(error));
      }
      if (stopped) return;
      onState("reconnecting", dropped);
      dropped = undefined;
      await new Promise((resolve) => setTimeout(resolve, retry));
      retry = Math.min(retry * 2, 10000);
    }
  }
  connect();
  return () => { stopped = true; controller && controller.abort(); };
}
