// The Connections section: a person's own connections to the servers that act as them (per-user OAuth servers;
// GET/POST/DELETE /api/v1/agent/connections...). Shown to a key whose calls name an end user and an agent-service
// that has the endpoint; any 4xx of the list (404: not there; a key without a user) hides it. Besides the
// connections held, it offers Connect for a server a run of this page was refused for want of a consent.
import { api, json, notForThisKey } from "./api.js";
import { CONNECTIONS_PATH, connectionPath, connectOwn } from "./authorization.js";
import { button, el, errorLine, formFailure } from "./dom.js";

const $ = (id) => document.getElementById(id);
const ui = {
  panel: $("connections-panel"),
  list: $("connections"),
  note: $("connections-note"),
};

// wanted: servers a run said need this person's consent; available: the per-user servers they have not connected
const mine = { connections: [], available: [], wanted: new Set() };

async function loadConnections() {
  let body;
  try {
    body = await json(CONNECTIONS_PATH);
  } catch (failure) {
    ui.panel.hidden = notForThisKey(failure);
    formFailure(ui.note, `Connections unavailable: ${failure.message}`);
    return;
  }
  ui.panel.hidden = false;
  mine.connections = body.connections || [];
  mine.available = body.available || [];
  render();
}

function render() {
  const held = new Set(mine.connections.map((connection) => connection.server));
  const wanted = [...mine.wanted].filter((server) => !held.has(server));
  const unconnected = mine.available.filter((server) => !held.has(server));
  ui.list.replaceChildren(
    ...mine.connections.map(connectedCard),
    ...[...new Set([...unconnected, ...wanted])].map(unconnectedCard),
  );
  ui.note.hidden = false;
  ui.note.textContent = held.size
    ? `Connected to ${held.size} server${held.size === 1 ? "" : "s"} as you.`
    : "No server acts as you yet.";
}

function connectedCard(connection) {
  const card = el("li", "server-card connection-card");
  card.dataset.server = connection.server;
  const head = el("div", "server-head");
  head.append(el("span", "server-name", connection.server), el("span", "auth-state auth-authorized", "connected"));
  card.appendChild(head);
  if (connection.scopes && connection.scopes.length) {
    card.appendChild(el("div", "server-detail", `Scopes: ${connection.scopes.join(" ")}`));
  }
  if (connection.updatedAt) {
    card.appendChild(el("div", "server-detail", `Since ${new Date(connection.updatedAt).toLocaleString()}`));
  }
  const failure = errorLine();
  const disconnect = button("small-button danger", "Disconnect", `Disconnect ${connection.server}`);
  disconnect.addEventListener("click", async () => {
    disconnect.disabled = true;
    formFailure(failure, "");
    try {
      await api(connectionPath(connection.server), { method: "DELETE" });
    } catch (failed) {
      if (failed.code !== "connection_not_found") {
        disconnect.disabled = false;
        formFailure(failure, `Could not disconnect ${connection.server}: ${failed.message}`);
        return;
      }
    }
    loadConnections();
  });
  card.append(failure, disconnect);
  return card;
}

function unconnectedCard(server) {
  const card = el("li", "server-card connection-card");
  card.dataset.server = server;
  const head = el("div", "server-head");
  head.append(el("span", "server-name", server), el("span", "auth-state auth-required", "not connected"));
  card.appendChild(head);
  const failure = errorLine();
  const opened = el("p", "note consent-note");
  opened.hidden = true;
  const connect = button("small-button", "Connect", `Connect ${server}`);
  connect.addEventListener("click", async () => {
    connect.disabled = true;
    formFailure(failure, "");
    await connectOwn(server, { opened, failure, returned: loadConnections });
    connect.disabled = false;
  });
  card.append(opened, failure, connect);
  return card;
}

// Answers {load, wanted}: ``wanted(server)`` notes a server a run was refused for want of this person's consent.
export function initConnections() {
  return {
    load: loadConnections,
    wanted(server) {
      mine.wanted.add(server);
      if (!ui.panel.hidden) render();
    },
  };
}
