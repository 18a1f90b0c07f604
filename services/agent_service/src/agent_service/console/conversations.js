// The conversations: the list of the stored ones (each marked while its run waits for a person), and the one shown,
// loaded from the store and rendered as turns; its run still in progress, if any, is followed (runs.js).
import { json } from "./api.js";
import { CONVERSATION_STORE, state } from "./console-state.js";
import { el } from "./dom.js";
import { imagesOf, textOf } from "./images.js";
import { applySettings, hideNewChat, startFresh } from "./run-settings.js";
import { leaveWaitingRun, replay } from "./runs.js";
import { closeSideOnPhone } from "./side-panel.js";
import { addUserMessage, showError, transcript } from "./transcript.js";
import { Turn } from "./turn.js";

const ui = {
  conversations: document.getElementById("conversations"),
  conversationsNote: document.getElementById("conversations-note"),
};

// Renders stored messages as turns: a user message opens one; the assistant's reasoning, tool calls and
// answer fill it; each tool message fills its call's card. ``runs`` (oldest first) give the footers. A page
// that starts inside a run (after its question) starts with that run's footer to come.
function renderStored(messages, runs) {
  let turn = null;
  let runIndex = messages.length && messages[0].role !== "user" && messages[0].role !== "system" ? 0 : -1;
  const closeTurn = () => {
    const run = runs[runIndex];
    if (turn && run) {
      if (run.error) turn.error(run.error.code, run.error.message);
      else if (run.finishReason) turn.finish(run.finishReason, run.iterations, run.usage);
    }
    turn = null;
  };
  for (const message of messages) {
    if (message.role === "user") {
      closeTurn();
      runIndex++;
      addUserMessage(message.content || "");
      continue;
    }
    if (message.role === "system") continue;
    if (!turn) turn = new Turn();
    if (message.role === "assistant") {
      turn.storedTurns = (turn.storedTurns || 0) + 1; // each stored assistant message: its own blocks
      const iteration = turn.storedTurns;
      for (const block of message.reasoning || []) if (block.text) turn.reasoning(iteration, block.text);
      for (const call of message.toolCalls || []) turn.toolCall(call.id, call.name, call.arguments);
      if (message.content) turn.text(iteration, textOf(message.content));
    } else if (message.role === "tool") {
      const urls = imagesOf(message.content);
      turn.toolResult(message.toolCallId, textOf(message.content), Boolean(message.isError), undefined, null, urls);
    }
  }
  closeTurn();
}

// A waiting run (a tool call waits for approval, or for an answer to its server's question) is followed too: its
// cards offer Approve and Deny, or the question's form.
const ACTIVE_STATUSES = new Set(["processing", "tool_loop", "waiting"]);

// Shows a stored conversation; answers its run still in progress, if any (a conversation takes one at a
// time, so it is the last), which the caller replays from its events. That run's messages start at its
// question, the conversation's last user message: everything before it is shown from the store, the rest
// from the run's events from the first, so that each step shows once whatever the run did meanwhile.
async function loadConversation(conversationId) {
  transcript.replaceChildren();
  state.conversationId = conversationId;
  sessionStorage.setItem(CONVERSATION_STORE, conversationId);
  markCurrentConversation();
  let conversation;
  try {
    conversation = await json(`/api/v1/agent/conversations/${encodeURIComponent(conversationId)}`);
  } catch (failure) {
    if (failure.status === 404) {
      startFresh(); // nothing stored yet: a new conversation
      return null;
    }
    showError(`Could not load the conversation: ${failure.message}`);
    return null;
  }
  state.fresh = false;
  hideNewChat();
  applySettings(conversation.settings);
  if (conversation.settings && conversation.settings.systemPrompt) {
    const prompt = el("details", "system-prompt-shown");
    prompt.appendChild(el("summary", null, "System prompt"));
    prompt.appendChild(el("div", "system-prompt-text", conversation.settings.systemPrompt));
    transcript.appendChild(prompt);
  }
  let messages = conversation.messages || [];
  let runs = conversation.runs || [];
  if (conversation.earlier) {
    // The newest page only: a long conversation is never loaded whole (the API answers it in pages).
    transcript.appendChild(el("p", "note standalone", "Earlier messages of this conversation are not shown."));
  }
  const last = runs[runs.length - 1];
  if (!last || !ACTIVE_STATUSES.has(last.status)) {
    renderStored(messages, runs);
    return null;
  }
  const questionAt = messages.map((message) => message.role).lastIndexOf("user");
  const question = questionAt >= 0 ? messages[questionAt].content || "" : ""; // its text, or its parts
  messages = questionAt >= 0 ? messages.slice(0, questionAt) : messages;
  runs = runs.slice(0, -1);
  renderStored(messages, runs);
  return { runId: last.runId, question };
}

export async function showConversation(conversationId) {
  const active = await loadConversation(conversationId);
  document.body.dataset.ready = "true"; // for tests and scripts: the page shows what is stored
  if (active) await replay(active, conversationId);
}

export async function refreshConversations() {
  try {
    const body = await json("/api/v1/agent/conversations?limit=50");
    const items = body.conversations || [];
    ui.conversations.replaceChildren(
      ...items.map((conversation) => {
        const item = el("li");
        const button = el("button", "conversation", conversation.title || conversation.conversationId);
        button.type = "button";
        button.dataset.conversationId = conversation.conversationId;
        button.dataset.status = conversation.status || "";
        button.title = `${conversation.runs ?? "?"} runs · ${conversation.updatedAt || ""}`;
        if (conversation.status === "waiting") {
          // Its newest run waits for a decision on a tool call: open it to approve or deny.
          button.classList.add("waiting");
          button.title += " · a tool call waits for a decision or an answer";
          button.prepend(el("span", "waiting-badge", "waiting"), document.createTextNode(" "));
        }
        button.addEventListener("click", () => openConversation(conversation.conversationId));
        item.appendChild(button);
        return item;
      }),
    );
    ui.conversationsNote.hidden = items.length > 0;
    ui.conversationsNote.textContent = "No conversation yet.";
    markCurrentConversation();
  } catch (failure) {
    ui.conversationsNote.hidden = false;
    ui.conversationsNote.textContent = `Conversations unavailable: ${failure.message}`;
  }
}

export function markCurrentConversation() {
  for (const button of ui.conversations.querySelectorAll("button.conversation")) {
    button.classList.toggle("current", button.dataset.conversationId === state.conversationId);
    button.setAttribute("aria-current", button.dataset.conversationId === state.conversationId ? "true" : "false");
  }
}

async function openConversation(conversationId) {
  if (!(await leaveWaitingRun())) return; // one run at a time; Stop it first
  closeSideOnPhone();
  await showConversation(conversationId);
}
