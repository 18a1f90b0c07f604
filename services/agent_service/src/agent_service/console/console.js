// The agent console: a chat over agent-service's own API (same origin), no build step, no libraries.
// Everything shown from the model, the tools or the store goes in through textContent or createTextNode:
// no string from them is ever parsed as HTML (see renderMarkdown in markdown.js).
// The entry point (index.html loads it with type="module"): it wires the modules beside it and starts the page.
// The transcript and its turns (transcript.js, turn.js), the conversations list (conversations.js), a run in flight
// (runs.js), the composer (composer.js), the run's settings and tools (run-settings.js, tools-panel.js), and the
// Servers, Connections and Runtime sections are modules of their own.
import { focusMessage, initComposer, loadSuggestions } from "./composer.js";
import { initConnections } from "./connections.js";
import { CONVERSATION_STORE, INFLIGHT_STORE, newConversationId, state } from "./console-state.js";
import { markCurrentConversation, refreshConversations, showConversation } from "./conversations.js";
import { initRunSettings, loadModels, loadPersonas, startFresh } from "./run-settings.js";
import { initRuns, leaveWaitingRun, send, syncLeave } from "./runs.js";
import { initRuntime } from "./runtime.js";
import { initServers } from "./servers.js";
import { closeSideOnPhone, initSidePanel } from "./side-panel.js";
import { loadTools } from "./tools-panel.js";
import { transcript } from "./transcript.js";
import { initTurns } from "./turn.js";

const $ = (id) => document.getElementById(id);
const ui = {
  newConversation: $("new-conversation"),
  keyForm: $("key-form"),
};

initComposer({ send });
initRunSettings();
initSidePanel();
ui.newConversation.addEventListener("click", async () => {
  if (!(await leaveWaitingRun())) return;
  state.conversationId = newConversationId();
  sessionStorage.setItem(CONVERSATION_STORE, state.conversationId);
  transcript.replaceChildren();
  startFresh();
  markCurrentConversation();
  closeSideOnPhone();
  focusMessage();
});
ui.keyForm.addEventListener("submit", () => {
  // method="dialog" closes the dialog; the close handler reads the key
});
const loadServers = initServers({ onToolsChanged: loadTools });
const loadRuntime = initRuntime();
const connections = initConnections();
initTurns({
  onWaitingChanged: () => {
    syncLeave(); // a waiting run may be left
    refreshConversations(); // the list marks its conversation as waiting, or no longer
  },
  connections,
});
initRuns({ onRunEnded: refreshConversations });

async function start() {
  await Promise.all([
    loadModels(),
    loadTools(),
    loadPersonas(),
    loadSuggestions(),
    refreshConversations(),
    loadServers(),
    loadRuntime(),
    connections.load(),
  ]);
  // A run in flight when the page was left (reloaded): its conversation shows it, re-attached.
  const inflight = JSON.parse(sessionStorage.getItem(INFLIGHT_STORE) || "null");
  sessionStorage.removeItem(INFLIGHT_STORE);
  if (inflight && inflight.conversationId) state.conversationId = inflight.conversationId;
  // A conversation this tab has not sent to yet is not stored: nothing to load.
  if (inflight || sessionStorage.getItem(CONVERSATION_STORE)) await showConversation(state.conversationId);
  else {
    startFresh();
    document.body.dataset.ready = "true";
  }
}

start();
