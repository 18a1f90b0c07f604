// OAuth consent in the console: a server behind OAuth holds a token for the tenant ("machine") or for each person
// ("perUser"); a consent is given on the authorization server's own page, opened in a new window, which comes back to
// agent-service's callback (GET /api/v1/agent/oauth/callback) and closes there. The console never sees a token or a
// code: it opens the URL it is given, and reads the state again when the person comes back to it.
//
// A consent is bound to the browser that asked for it (the authorize endpoints set a cookie the callback checks), so
// the console always asks for the URL itself, never opening one it was handed by a run's event.
//
// Used by a run's authorization_required event (turn.js: "Connect <server>" on the tool card), the Servers
// section (servers.js: an admin connects a machine server, disconnects a server or a person), and the Connections
// section (connections.js: a person's own).
import { api, json } from "./api.js";
import { button, el, errorLine, formFailure } from "./dom.js";

export const ADMIN_CONNECTIONS_PATH = "/api/v1/admin/oauth-connections";

// Only a web address is opened: an authorization URL is the gateway's (from the server's metadata), never a
// javascript: or data: URL the page would run.
export function isWebAddress(url) {
  return typeof url === "string" && /^https?:\/\//i.test(url);
}

// What to do when the person comes back to this page (from the consent window): read the state again, once.
const onReturn = new Set();
window.addEventListener("focus", () => {
  const callbacks = [...onReturn];
  onReturn.clear();
  for (const callback of callbacks) callback();
});

// Opens the consent page in a new window (no opener: it cannot reach this page), and puts a link to it in ``slot``
// as well, for a browser that blocked the window; ``returned``: called when the person is back on this page.
export function openConsent(url, slot, returned) {
  if (!isWebAddress(url)) {
    formFailure(slot, "The authorization URL is not a web address; it was not opened.");
    return;
  }
  window.open(url, "_blank", "noopener,noreferrer");
  const link = el("a", "consent-link", "Open the authorization page again");
  link.href = url;
  link.target = "_blank";
  link.rel = "noopener noreferrer";
  slot.replaceChildren(
    document.createTextNode("The authorization page opened in a new window; come back here when it says done. "),
    link,
  );
  slot.hidden = false;
  if (returned) onReturn.add(returned);
}

// A person's own consent to a per-user server: asked by this browser (POST .../connections/{server}/authorize, whose
// answer binds the consent to it with a cookie), then opened; ``connected``: a usable token is held already (nothing
// to open). ``opened``: where the consent link goes; ``failure``: where a failure is said (else ``opened``).
export const CONNECTIONS_PATH = "/api/v1/agent/connections";

export function connectionPath(server) {
  return `${CONNECTIONS_PATH}/${encodeURIComponent(server)}`;
}

export async function connectOwn(server, { opened, failure, returned }) {
  try {
    const answer = await json(`${connectionPath(server)}/authorize`, { method: "POST" });
    if (answer.authorized) returned?.();
    else openConsent(answer.authorizationUrl, opened, returned);
  } catch (failed) {
    formFailure(failure || opened, `Could not connect ${server}: ${failed.message}`);
  }
}

// The box a run's authorization_required event puts on its tool card: the call was not made. A per-user server:
// Connect asks this person's consent (bound to this browser) and opens it. A machine server: its one token serves
// the whole tenant, so only an administrator connects it (Servers section): no button, no URL.
export function consentPrompt(data, returned) {
  const box = el("div", "authorization");
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", `Authorization of ${data.server}`);
  if (data.tokens !== "perUser") {
    box.appendChild(
      el(
        "p",
        "authorization-text",
        `${data.server} is not connected: this call was not made. An administrator must connect ${data.server}.`,
      ),
    );
    return box;
  }
  box.appendChild(
    el(
      "p",
      "authorization-text",
      `${data.server} needs your authorization: this call was not made. Connect, then send your message again.`,
    ),
  );
  const connect = button("connect", `Connect ${data.server}`);
  const opened = el("p", "note consent-note");
  opened.hidden = true;
  connect.addEventListener("click", async () => {
    connect.disabled = true;
    await connectOwn(data.server, { opened, returned });
    connect.disabled = false;
  });
  box.append(connect, opened);
  return box;
}

// A server's authorization as its card shows it: the gateway's status (``authorization``: tokens, state,
// authorizationUrl), else what its ``auth`` block says (its state then unknown); null: not behind OAuth.
export function authorizationOf(server) {
  if (server.authorization) return { tokens: "machine", ...server.authorization };
  if (server.auth && server.auth.type === "oauth") return { tokens: server.auth.tokens || "machine", state: null };
  return null;
}

const STATE_WORDS = { authorized: "authorized", required: "authorization required" };

// The connections of the tenant's servers (admin), by server name; null when this agent-service has no such list
// (an older one: 404) or this key may not read it.
export async function loadAdminConnections() {
  try {
    const body = await json(ADMIN_CONNECTIONS_PATH);
    const byServer = new Map();
    for (const connection of body.connections || []) {
      if (!byServer.has(connection.server)) byServer.set(connection.server, []);
      byServer.get(connection.server).push(connection);
    }
    return byServer;
  } catch {
    return null;
  }
}

// The authorization part of an admin's server card: its state, Connect (a machine server: the tenant's consent,
// given by this admin) and Disconnect (the tenant's token, or one person's). ``authorizePath``: the server's
// POST .../authorize; ``connections``: its connections, when known; ``changed``: read the servers again.
export function authorizationBlock(server, { authorizePath, connections, changed }) {
  const authorization = authorizationOf(server);
  if (!authorization) return null;
  const block = el("div", "server-authorization");
  const failure = errorLine();
  const opened = el("p", "note consent-note");
  opened.hidden = true;
  const perUser = authorization.tokens === "perUser";
  const state = authorization.state;
  const words = perUser ? "each person connects" : STATE_WORDS[state] || "OAuth";
  const badge = el("span", `auth-state auth-${perUser ? "per-user" : state || "unknown"}`, words);
  block.append(el("span", "server-detail", "OAuth: "), badge);
  if (!perUser) {
    if (state !== "authorized") {
      const connect = button("small-button", "Connect", `Connect ${server.name}`);
      connect.dataset.control = "connect";
      const controls = { connect, failure, opened, changed };
      connect.addEventListener("click", () => connectMachine(server.name, authorizePath, controls));
      block.append(" ", connect);
    }
    if (state === "authorized" || (connections && connections.some((connection) => !connection.user))) {
      block.append(" ", disconnectButton(server.name, null, `Disconnect ${server.name}`, { failure, changed }));
    }
  } else if (connections) {
    const people = connections.filter((connection) => connection.user);
    const counted = `${people.length} ${people.length === 1 ? "person" : "people"} connected`;
    block.appendChild(el("div", "server-detail", counted));
    const list = el("ul", "auth-people");
    for (const connection of people) {
      const item = el("li", null, connection.user + " ");
      item.appendChild(
        disconnectButton(server.name, connection.user, `Disconnect ${connection.user} from ${server.name}`, {
          failure,
          changed,
        }),
      );
      list.appendChild(item);
    }
    if (people.length) block.appendChild(list);
  }
  block.append(opened, failure);
  return block;
}

async function connectMachine(name, authorizePath, { connect, failure, opened, changed }) {
  connect.disabled = true;
  formFailure(failure, "");
  try {
    const answer = await json(authorizePath, { method: "POST" });
    if (answer.authorized) {
      changed(); // a usable token is held already: nothing to consent to
      return;
    }
    openConsent(answer.authorizationUrl, opened, changed);
  } catch (failed) {
    formFailure(failure, `Could not connect ${name}: ${failed.message}`);
  } finally {
    connect.disabled = false;
  }
}

function disconnectButton(server, user, label, { failure, changed }) {
  const disconnect = button("small-button danger", "Disconnect", label);
  disconnect.dataset.control = user ? `disconnect-${user}` : "disconnect";
  disconnect.addEventListener("click", async () => {
    disconnect.disabled = true;
    formFailure(failure, "");
    const query = new URLSearchParams({ server });
    if (user) query.set("user", user);
    try {
      await api(`${ADMIN_CONNECTIONS_PATH}?${query}`, { method: "DELETE" });
    } catch (failed) {
      if (failed.code !== "connection_not_found") {
        disconnect.disabled = false;
        formFailure(failure, `Could not disconnect ${user || server}: ${failed.message}`);
        return;
      }
    }
    changed();
  });
  return disconnect;
}
