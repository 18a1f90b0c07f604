// What the console's modules share about the conversation shown and its run in flight, and where the tab keeps
// them across a reload (sessionStorage: this tab only).
export const INFLIGHT_STORE = "console.inflight"; // {runId, conversationId} while a run streams
export const CONVERSATION_STORE = "console.conversation";

export function newConversationId() {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export const state = {
  conversationId: sessionStorage.getItem(CONVERSATION_STORE) || newConversationId(),
  runId: null, // the run in flight, if any
  abort: null, // closes the run's stream: how a run that is not stored is stopped, and a waiting run left
  turn: null, // the Turn of the run in flight
  leaving: null, // while a waiting run is left: resolves once its stream has closed
  leftRun: null, // resolves ``leaving``: called once the left run's stream is done with (runs.js runEnded)
  unstored: false, // agent-service keeps no runs (AGENT_DATABASE_URL empty): no conversations, no re-attach
  fresh: true, // nothing of the conversation is stored yet: its first message carries the system prompt
};
