// agent-service's API, as the console calls it: the caller key (asked for once, kept in this tab only), JSON
// bodies, refusals as ApiFailure {status, code, message}, and server-sent events read over fetch.

const KEY_STORE = "console.apiKey"; // sessionStorage only: the key never outlives the tab
const keyDialog = document.getElementById("key-dialog");
const keyInput = document.getElementById("key-input");

export class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let keyPrompt = null;

function askForKey() {
  // One dialog at a time: requests that meet a 401 together wait for the same answer.
  if (!keyPrompt) {
    keyPrompt = new Promise((resolve) => {
      keyInput.value = "";
      keyDialog.addEventListener(
        "close",
        () => {
          const key = keyInput.value.trim();
          if (key) sessionStorage.setItem(KEY_STORE, key);
          keyPrompt = null;
          resolve(Boolean(key));
        },
        { once: true },
      );
      keyDialog.showModal();
      keyInput.focus();
    });
  }
  return keyPrompt;
}

export async function api(path, options = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = new Headers(options.headers || {});
    const key = sessionStorage.getItem(KEY_STORE);
    if (key) headers.set("Authorization", "Bearer " + key);
    if (options.body !== undefined) headers.set("Content-Type", "application/json");
    const response = await fetch(path, {
      method: options.method || "GET",
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal: options.signal,
    });
    if (response.status === 401 && attempt < 3) {
      sessionStorage.removeItem(KEY_STORE);
      if (await askForKey()) continue;
    }
    if (!response.ok) throw await failureOf(response);
    return response;
  }
}

async function failureOf(response) {
  let code = "http_" + response.status;
  let message = response.status + " " + response.statusText;
  try {
    const body = await response.json();
    const error = body.error || body;
    if (error.code) code = error.code;
    if (error.message) message = error.message;
  } catch {
    // not JSON: the status line says enough
  }
  return new ApiFailure(response.status, code, message);
}

export async function json(path, options) {
  return (await api(path, options)).json();
}

// Server-sent events over fetch (EventSource cannot send Authorization or Last-Event-ID itself).
export async function* readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { id: null, event: "message", data: [] };
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") event.id = Number(value);
        else if (field === "event") event.event = value;
        else if (field === "data") event.data.push(value);
      }
      if (event.data.length) yield { id: event.id, event: event.event, data: JSON.parse(event.data.join("\n")) };
    }
  }
}

// A refusal that says this key may not use an endpoint, or that this agent-service has none (404): the panel that
// needs it is hidden rather than shown broken.
export function notForThisKey(failure) {
  return failure.status >= 400 && failure.status < 500;
}
