// A run of the conversation shown: sending a message starts one, whose stream fills a Turn (turn.js) and is
// re-attached if it breaks; Stop cancels it; a run already under way (after a reload, or from the list) is followed
// from its first event. One run at a time: while one is in flight the page keeps it, unless it waits for a person.
import { api, readEvents } from "./api.js";
import { clearComposer, hasAttachments, messageContent } from "./composer.js";
import { CONVERSATION_STORE, INFLIGHT_STORE, state } from "./console-state.js";
import { askForModelName, chosenModel, chosenSettings, hideNewChat, systemPrompt } from "./run-settings.js";
import { chosenTools } from "./tools-panel.js";
import { addUserMessage, showError, showNote } from "./transcript.js";
import { Turn } from "./turn.js";

const MAX_REATTACHES = 5;

const $ = (id) => document.getElementById(id);
const ui = {
  newConversation: $("new-conversation"),
  send: $("send"),
  stop: $("stop"),
};

// What a run's end tells the rest of the page, given once by console.js (the list is a module that uses this one).
const hooks = {
  onRunEnded: () => {}, // the conversations list is read again
};

function setRunning(runId, conversationId) {
  state.runId = runId;
  if (runId) sessionStorage.setItem(INFLIGHT_STORE, JSON.stringify({ runId, conversationId }));
  else sessionStorage.removeItem(INFLIGHT_STORE);
  ui.stop.hidden = !runId;
  ui.send.disabled = Boolean(runId);
  syncLeave();
  document.body.classList.toggle("running", Boolean(runId));
}

// A run whose tool calls wait for approval waits in the store, not in this page: it may be left (New conversation,
// or another one of the list, where it is marked as waiting) and followed again from the list. Leaving cancels
// nothing. Any other run in flight keeps the page (Stop it first).
export function syncLeave() {
  ui.newConversation.disabled = Boolean(state.runId) && !(state.turn && state.turn.waiting());
}

// Closes the stream of a waiting run; answers whether the page is free for another conversation.
export async function leaveWaitingRun() {
  if (!state.runId) return true;
  if (!state.turn || !state.turn.waiting() || !state.abort) return false;
  state.leaving = new Promise((resolve) => {
    state.leftRun = resolve;
  });
  state.abort.abort();
  await state.leaving;
  return true;
}

// A run's stream is done with: it ended, failed, or was left.
function runEnded() {
  const left = state.leftRun;
  Object.assign(state, { abort: null, turn: null, leaving: null, leftRun: null });
  setRunning(null);
  hooks.onRunEnded();
  if (left) left();
}

async function follow(turn, response, runId, signal) {
  // Reads the stream; if it breaks before the run's end, re-attaches after the last event shown.
  for (let attempt = 0; ; attempt++) {
    try {
      for await (const event of readEvents(response)) turn.apply(event.id, event.event, event.data);
    } catch (failure) {
      if (attempt >= MAX_REATTACHES || failure.name === "AbortError") throw failure;
    }
    if (turn.ended || attempt >= MAX_REATTACHES) return;
    response = await api(`/api/v1/agent/runs/${encodeURIComponent(runId)}/events`, {
      headers: { "Last-Event-ID": String(turn.lastSeq) },
      signal,
    });
  }
}

// Follows a run already under way (started before a reload, or in another tab) from its first event.
export async function replay(active, conversationId) {
  addUserMessage(active.question);
  const turn = new Turn(active.runId);
  const abort = new AbortController();
  Object.assign(state, { abort, turn });
  setRunning(active.runId, conversationId);
  try {
    const response = await api(`/api/v1/agent/runs/${encodeURIComponent(active.runId)}/events`, {
      headers: { "Last-Event-ID": "0" },
      signal: abort.signal,
    });
    await follow(turn, response, active.runId, abort.signal);
  } catch (failure) {
    if (!state.leaving) turn.error(failure.code || "network", failure.message);
  } finally {
    runEnded();
  }
}

export async function send(text) {
  if (state.runId || (!text.trim() && !hasAttachments())) return;
  if (!chosenModel()) {
    showError("Type a model name first (the picker's Other… entry).");
    askForModelName();
    return;
  }
  const conversationId = state.conversationId;
  sessionStorage.setItem(CONVERSATION_STORE, conversationId);
  const prompt = state.fresh ? systemPrompt() : "";
  hideNewChat();
  const content = messageContent(text);
  addUserMessage(content);
  clearComposer();
  const messages = [{ role: "user", content }];
  if (prompt) messages.unshift({ role: "system", content: prompt });
  const body = { model: chosenModel(), messages, stream: true, ...chosenSettings() };
  if (!state.unstored) Object.assign(body, { conversationId, onDisconnect: "continue" });
  const tools = chosenTools();
  if (tools !== undefined) body.tools = tools;
  setRunning("pending", conversationId);
  const abort = new AbortController();
  state.abort = abort;
  let response;
  try {
    try {
      response = await api("/api/v1/agent/run", { method: "POST", body, signal: abort.signal });
    } catch (failure) {
      if (failure.code !== "runs_not_stored" || state.unstored) throw failure;
      // Without a run store the run is this one message, tied to this page: it cannot outlive a reload.
      state.unstored = true;
      showNote("Runs are not stored by this agent-service: each message starts afresh, and a reload ends the run.");
      delete body.conversationId;
      delete body.onDisconnect;
      response = await api("/api/v1/agent/run", { method: "POST", body, signal: abort.signal });
    }
  } catch (failure) {
    setRunning(null);
    showError(`Error (${failure.code || "network"}): ${failure.message}`);
    return;
  }
  const runId = response.headers.get("X-Agent-Run-Id");
  state.fresh = state.unstored; // stored now, with its system prompt (an unstored run sends it each time)
  const turn = new Turn(runId);
  state.turn = turn;
  setRunning(runId, conversationId);
  try {
    await follow(turn, response, runId, abort.signal);
    if (!turn.ended) turn.error("stream_ended", "The stream ended before the run did; reload to follow it.");
  } catch (failure) {
    if (state.leaving) return; // left while it waits (the finally clears up): the list brings it back
    if (abort.signal.aborted) turn.finish("cancelled");
    else turn.error(failure.code || "network", failure.message);
  } finally {
    runEnded();
  }
}

async function stop() {
  const runId = state.runId;
  if (!runId || runId === "pending") return;
  if (state.unstored) {
    state.abort?.abort(); // a run that is not stored belongs to its connection: closing it cancels the run
    return;
  }
  ui.stop.disabled = true;
  try {
    await api(`/api/v1/agent/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
  } catch (failure) {
    showError(`Could not stop the run: ${failure.message}`);
  } finally {
    ui.stop.disabled = false;
  }
}

export function initRuns({ onRunEnded }) {
  hooks.onRunEnded = onRunEnded;
  ui.stop.addEventListener("click", stop);
}
