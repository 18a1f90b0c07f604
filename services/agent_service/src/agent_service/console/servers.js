// The Servers section: a tenant's own MCP servers, for admin keys only.
// Shown to a key the admin API answers: an admin key, for its own tenant (an open API is the admin of "default").
// Any other 4xx hides it: a plain key's 403 admin_only, an operator key's 400 (it names a tenant with ?tenant=,
// which the console does not). A header value typed in is sent once and never kept: the form is reset after a
// save, and the answers carry the headers' names only. A server behind OAuth shows its authorization on its card
// (authorization.js): Connect and Disconnect.
import { api, json, notForThisKey } from "./api.js";
import { authorizationBlock, authorizationOf, loadAdminConnections } from "./authorization.js";
import { button, el, errorLine, formFailure } from "./dom.js";

export const SERVERS_PATH = "/api/v1/admin/mcp-servers";

const $ = (id) => document.getElementById(id);
const ui = {
  serversPanel: $("servers-panel"),
  servers: $("servers"),
  serversNote: $("servers-note"),
  serversRefresh: $("servers-refresh"),
  serverAdd: $("server-add"),
  serverForm: $("server-form"),
  serverName: $("server-name"),
  serverUrl: $("server-url"),
  serverTransport: $("server-transport"),
  serverHeaderName: $("server-header-name"),
  serverHeaderValue: $("server-header-value"),
  serverFormError: $("server-form-error"),
  serverSave: $("server-save"),
  deleteDialog: $("delete-dialog"),
  deleteTitle: $("delete-title"),
  deleteText: $("delete-text"),
};

const CONNECTING_POLL_MS = 2000; // a new or switched-on server connects in the background: its card is re-read
const MAX_CONNECTING_POLLS = 15;
const STATE_WORDS = {
  ready: "ready",
  idle: "idle",
  connecting: "connecting…",
  degraded: "degraded",
  failed: "failed",
  disabled: "off",
};

// connections: the tenant's OAuth connections by server (null: none listed, or no such endpoint here).
const admin = { loaded: false, servers: [], maxServers: null, polls: 0, pollTimer: null, connections: null };
let toolsChanged = () => {}; // initServers' onToolsChanged: the Tools section lists the tenant's catalog again

function serversPath(name) {
  return `${SERVERS_PATH}/${encodeURIComponent(name)}`;
}

async function loadServers() {
  let body;
  try {
    body = await json(SERVERS_PATH);
  } catch (failure) {
    ui.serversPanel.hidden = notForThisKey(failure);
    ui.serversNote.hidden = false;
    ui.serversNote.textContent = `Servers unavailable: ${failure.message}`;
    return;
  }
  ui.serversPanel.hidden = false;
  const toolCounts = serverToolCounts();
  admin.servers = body.servers || [];
  admin.maxServers = body.maxServers ?? null;
  // Who is connected to the servers behind OAuth (asked only when there is one).
  admin.connections = admin.servers.some(authorizationOf) ? await loadAdminConnections() : null;
  renderServers();
  // Tools listed (or gone) since the last look (a server done connecting): the Tools section follows.
  if (admin.loaded && serverToolCounts() !== toolCounts) toolsChanged();
  admin.loaded = true;
  pollWhileConnecting();
}

function serverToolCounts() {
  return admin.servers.map((server) => `${server.name}:${server.enabled}:${server.toolCount}`).join(",");
}

function pollWhileConnecting() {
  clearTimeout(admin.pollTimer);
  if (!admin.servers.some((server) => server.state === "connecting")) admin.polls = 0;
  else if (admin.polls < MAX_CONNECTING_POLLS) {
    admin.polls++;
    admin.pollTimer = setTimeout(loadServers, CONNECTING_POLL_MS);
  }
}

// The cards, again: a tools list left open and the control that had the focus stay so.
function renderServers() {
  const open = new Set(
    [...ui.servers.querySelectorAll(".server-tools[open]")].map((details) => details.closest("li").dataset.server),
  );
  const focused = document.activeElement && document.activeElement.closest(".server-card");
  const focusedControl = focused ? document.activeElement.dataset.control : null;
  ui.servers.replaceChildren(...admin.servers.map((server) => serverCard(server, open.has(server.name))));
  if (focusedControl) focusServerControl(focused.dataset.server, focusedControl);
  const cap = admin.maxServers === null ? "" : ` (at most ${admin.maxServers})`;
  ui.serversNote.hidden = false;
  ui.serversNote.textContent = admin.servers.length
    ? `${admin.servers.length} server${admin.servers.length === 1 ? "" : "s"} of your own${cap}.`
    : `No server of your own yet${cap}.`;
}

function focusServerControl(name, control) {
  for (const card of ui.servers.querySelectorAll(".server-card")) {
    if (card.dataset.server === name) card.querySelector(`[data-control="${control}"]`)?.focus();
  }
}

function serverCard(server, toolsOpen) {
  const card = el("li", "server-card");
  card.dataset.server = server.name;
  card.dataset.state = server.state;
  const head = el("div", "server-head");
  head.appendChild(el("span", "server-name", server.name));
  head.appendChild(el("span", `server-state state-${server.state}`, STATE_WORDS[server.state] || server.state));
  const toggle = el("label", "server-toggle");
  const box = el("input", "server-enabled");
  box.type = "checkbox";
  box.setAttribute("role", "switch");
  box.setAttribute("aria-label", `${server.name} on`);
  box.dataset.control = "switch";
  box.checked = Boolean(server.enabled);
  box.addEventListener("change", () => switchServer(server.name, box));
  toggle.append(box, document.createTextNode(" On"));
  head.appendChild(toggle);
  card.appendChild(head);
  card.appendChild(el("div", "server-detail", `${server.url} · ${server.transport}`));
  if (server.headerNames && server.headerNames.length) {
    card.appendChild(el("div", "server-detail", `Headers: ${server.headerNames.join(", ")} (values not shown)`));
  }
  if (server.allowedTools) card.appendChild(el("div", "server-detail", `Only: ${server.allowedTools.join(", ")}`));
  if (server.lastError) card.appendChild(el("div", "server-error", `Last error: ${server.lastError}`));
  const authorization = authorizationBlock(server, {
    authorizePath: `${serversPath(server.name)}/authorize`,
    connections: admin.connections ? admin.connections.get(server.name) || [] : null,
    changed: () => loadServers(),
  });
  if (authorization) card.appendChild(authorization);
  const tools = server.tools || [];
  const count = server.toolCount ?? tools.length;
  const counted = `${count} tool${count === 1 ? "" : "s"}`;
  if (tools.length) {
    const list = el("details", "server-tools");
    list.open = toolsOpen;
    list.appendChild(el("summary", null, counted));
    const items = el("ul");
    for (const tool of tools) {
      const item = el("li", null, tool.name);
      if (tool.description) item.title = tool.description;
      items.appendChild(item);
    }
    list.appendChild(items);
    card.appendChild(list);
  } else {
    card.appendChild(el("div", "server-detail", server.state === "connecting" ? "Listing its tools…" : counted));
  }
  const failure = errorLine();
  failure.classList.add("card-failure"); // the card's own (its authorization part has another)
  card.appendChild(failure);
  const remove = button("small-button", "Delete", `Delete ${server.name}`);
  remove.dataset.control = "delete";
  remove.addEventListener("click", () => confirmDelete(server.name));
  card.appendChild(remove);
  return card;
}

function cardFailure(name, text) {
  for (const card of ui.servers.querySelectorAll(".server-card")) {
    if (card.dataset.server !== name) continue;
    const box = card.querySelector(".card-failure");
    box.textContent = text;
    box.hidden = false;
  }
}

// After a change: this tab's Tools section shows the tenant's catalog as runs now see it.
function serversChanged(servers) {
  admin.servers = servers;
  admin.polls = 0;
  renderServers();
  pollWhileConnecting();
  toolsChanged();
}

async function switchServer(name, box) {
  const enabled = box.checked;
  const focused = document.activeElement === box; // disabling it may take the focus away: it is given back
  box.disabled = true;
  try {
    const updated = await json(serversPath(name), { method: "PATCH", body: { enabled } });
    serversChanged(admin.servers.map((server) => (server.name === name ? updated : server)));
    if (focused) focusServerControl(name, "switch");
  } catch (failure) {
    box.checked = !enabled;
    box.disabled = false;
    if (focused) box.focus();
    cardFailure(name, `Could not switch ${name} ${enabled ? "on" : "off"}: ${failure.message}`);
  }
}

function confirmDelete(name) {
  ui.deleteTitle.textContent = `Delete ${name}?`;
  ui.deleteText.textContent = `${name} and its tools leave your runs; its header values are deleted with it.`;
  ui.deleteDialog.returnValue = "";
  ui.deleteDialog.addEventListener(
    "close",
    () => {
      if (ui.deleteDialog.returnValue === "delete") deleteServer(name);
    },
    { once: true },
  );
  ui.deleteDialog.showModal(); // Cancel, its first button, has the focus: Enter or Escape keeps the server
}

async function deleteServer(name) {
  try {
    await api(serversPath(name), { method: "DELETE" });
  } catch (failure) {
    if (failure.code !== "server_not_found") {
      cardFailure(name, `Could not delete ${name}: ${failure.message}`);
      return;
    }
  }
  serversChanged(admin.servers.filter((server) => server.name !== name));
  ui.serversRefresh.focus(); // the card that had the focus is gone
}

// The gateway's refusals of a registration, in words (its message says the detail: which cap, which address).
function registrationFailure(failure) {
  switch (failure.code) {
    case "url_not_allowed":
      return `This URL is not allowed: ${failure.message}`;
    case "server_exists":
      return `A server of this name exists already (yours or a shared one): pick another name. ${failure.message}`;
    case "too_many_servers":
      return `Your tenant has as many servers as it may: delete one first. ${failure.message}`;
    case "secrets_key_missing":
      return (
        "Header values cannot be stored here (the gateway has no secrets key): add the server without a header. " +
        failure.message
      );
    default:
      return `The server was not added: ${failure.message}`;
  }
}


async function addServer(event) {
  event.preventDefault();
  const headerName = ui.serverHeaderName.value.trim();
  if (Boolean(headerName) !== Boolean(ui.serverHeaderValue.value)) {
    formFailure(ui.serverFormError, "A header needs both a name and a value (or neither).");
    (headerName ? ui.serverHeaderValue : ui.serverHeaderName).focus();
    return;
  }
  const body = {
    name: ui.serverName.value.trim(),
    url: ui.serverUrl.value.trim(),
    transport: ui.serverTransport.value,
  };
  if (headerName) body.headers = { [headerName]: ui.serverHeaderValue.value };
  ui.serverSave.disabled = true;
  try {
    const created = await json(SERVERS_PATH, { method: "POST", body });
    ui.serverForm.reset(); // the header value leaves the page here
    formFailure(ui.serverFormError, "");
    serversChanged([...admin.servers.filter((server) => server.name !== created.name), created]);
    focusServerControl(created.name, "switch");
  } catch (failure) {
    formFailure(ui.serverFormError, registrationFailure(failure));
  } finally {
    ui.serverSave.disabled = false;
  }
}

// Wires the section; ``onToolsChanged``: called when the tenant's servers changed what its runs may use. Answers
// the loader (called at start, and again whenever the page wants the cards fresh).
export function initServers({ onToolsChanged }) {
  toolsChanged = onToolsChanged;
  ui.serverForm.addEventListener("submit", addServer);
  ui.serversRefresh.addEventListener("click", () => {
    admin.polls = 0;
    loadServers();
  });
  return loadServers;
}
