// A turn: one run's view in the transcript, built from the run's events (live, or replayed after a reload) or from
// its stored messages: its reasoning, its answer (Markdown), a card for each tool call (arguments, progress, an
// approval or a question waiting for the person, the result) and its footer or error.
import { json } from "./api.js";
import { approvalBox, approvalDecision } from "./approval-form.js";
import { consentPrompt } from "./authorization.js";
import { el } from "./dom.js";
import { formatBytes, imageStrip } from "./images.js";
import { questionBox, questionDecision } from "./input-form.js";
import { renderMarkdown } from "./markdown.js";
import { scrollToEnd, transcript } from "./transcript.js";

const LONG_RESULT_CHARS = 800;
const LONG_RESULT_LINES = 16;
const MOVED_RUN_CODES = new Set(["shutting_down", "run_moved"]); // the run goes on on another instance
const RENDER_EVERY_MS = 50; // a streamed answer's Markdown is rendered again at most this often

// What a turn tells the rest of the page, given once by console.js (the list and the run are modules that use Turn).
const hooks = {
  onWaitingChanged: () => {}, // a tool call started or stopped waiting for the person
  connections: null, // the Connections section (connections.js): a consent wanted, connections to read again
};

export function initTurns({ onWaitingChanged, connections }) {
  Object.assign(hooks, { onWaitingChanged, connections });
}

export class Turn {
  constructor(runId) {
    this.runId = runId || null; // where its approvals are posted (run_started says it too)
    this.root = el("div", "message assistant");
    this.root.appendChild(el("div", "role", "Agent"));
    this.body = el("div", "turn-body");
    this.root.appendChild(this.body);
    this.cards = new Map(); // tool call id -> card parts
    this.texts = new Map(); // iteration -> {node, text}
    this.reasonings = new Map(); // iteration -> {pre, text}
    this.lastSeq = 0;
    this.ended = false;
    transcript.appendChild(this.root);
  }

  // Applies one event; events already shown (a re-attach sends them again) are skipped.
  apply(id, type, data) {
    if (type === "error" && MOVED_RUN_CODES.has(data.code)) {
      // Sent by the instance this stream came from only, not a step of the run (which goes on elsewhere):
      // follow() re-attaches after the last event shown.
      this.body.appendChild(el("div", "note", `${data.message} Re-attaching…`));
      return;
    }
    if (id !== null && id <= this.lastSeq) return;
    if (id !== null) this.lastSeq = id;
    switch (type) {
      case "run_started":
        this.runId = data.runId;
        this.root.dataset.runId = data.runId;
        break;
      case "run_resumed":
        this.body.appendChild(el("div", "note", "The run was taken over by another instance and goes on."));
        break;
      case "reasoning":
        this.reasoning(data.iteration, data.delta);
        break;
      case "text":
        this.text(data.iteration, data.delta);
        break;
      case "tool_call":
        this.toolCall(data.id, data.name, data.arguments);
        break;
      case "tool_progress":
        this.toolProgress(data);
        break;
      case "tool_result":
        this.toolResult(data.toolCallId, data.content, data.isError, data.durationMs, data.images);
        break;
      case "approval_required":
        this.approvalRequired(data);
        break;
      case "approval_decided":
        this.approvalDecided(data);
        break;
      case "input_required":
        this.inputRequired(data);
        break;
      case "input_decided":
        this.inputDecided(data);
        break;
      case "authorization_required":
        this.authorizationRequired(data);
        break;
      case "context_compacted":
        this.body.appendChild(el("div", "note compacted", compactedText(data)));
        break;
      case "done":
        this.finish(data.finishReason, data.iterations, data.usage);
        break;
      case "error":
        this.error(data.code, data.message);
        break;
      default:
        break; // an event this page does not know yet: nothing to show
    }
    scrollToEnd();
  }

  reasoning(iteration, delta) {
    let block = this.reasonings.get(iteration);
    if (!block) {
      const details = el("details", "reasoning");
      details.appendChild(el("summary", null, "Reasoning"));
      const pre = el("pre", "reasoning-text");
      details.appendChild(pre);
      this.body.appendChild(details);
      block = { pre, text: "" };
      this.reasonings.set(iteration, block);
    }
    block.text += delta;
    block.pre.textContent = block.text;
  }

  // An answer is rendered again as its deltas come, but at most every RENDER_EVERY_MS: rendering it on every
  // delta would cost the square of its length over a stream. The last deltas show when the run ends.
  text(iteration, delta) {
    let part = this.texts.get(iteration);
    if (!part) {
      part = { node: el("div", "answer"), text: "", renderedAt: -Infinity, timer: null };
      this.body.appendChild(part.node);
      this.texts.set(iteration, part);
    }
    part.text += delta;
    if (part.timer !== null) return; // a render is due, and shows this delta too
    const wait = part.renderedAt + RENDER_EVERY_MS - performance.now();
    if (wait <= 0) this.renderText(part);
    else part.timer = setTimeout(() => this.renderText(part), wait);
  }

  renderText(part) {
    clearTimeout(part.timer);
    part.timer = null;
    part.node.replaceChildren(renderMarkdown(part.text));
    part.renderedAt = performance.now();
    scrollToEnd();
  }

  renderPendingTexts() {
    for (const part of this.texts.values()) if (part.timer !== null) this.renderText(part);
  }

  toolCall(id, name, args) {
    const card = el("details", "tool-card running");
    card.open = true;
    card.dataset.toolCallId = id;
    const summary = el("summary");
    summary.appendChild(el("span", "tool-name", name));
    const status = el("span", "tool-status", "running…");
    summary.appendChild(status);
    card.appendChild(summary);
    card.appendChild(el("div", "tool-label", "Arguments"));
    card.appendChild(el("pre", "tool-arguments", JSON.stringify(args ?? {}, null, 2)));
    const progress = el("div", "tool-progress");
    progress.hidden = true;
    card.appendChild(progress);
    const approval = el("div", "approval-slot");
    card.appendChild(approval);
    const result = el("div", "tool-result-slot");
    card.appendChild(result);
    this.body.appendChild(card);
    this.cards.set(id, { card, status, progress, approval, result, name });
    return this.cards.get(id);
  }

  // The call waits for a person: Approve or Deny (with a message for the model) on its card. The run waits in
  // the store, and this stream stays open: approval_decided, then the call's result, come on it.
  approvalRequired(data) {
    const parts = this.cards.get(data.toolCallId) || this.toolCall(data.toolCallId, data.name, data.arguments);
    parts.card.classList.add("waiting");
    parts.card.open = true;
    parts.status.textContent = "waiting for approval";
    const box = approvalBox(data, (yes, message, controls) => this.decide(data.toolCallId, yes, message, controls));
    parts.approval.replaceChildren(box);
    hooks.onWaitingChanged(); // the page may be left, and the list marks the conversation as waiting
  }

  // Whether a tool call of this run waits for a decision.
  waiting() {
    return [...this.cards.values()].some((parts) => parts.card.classList.contains("waiting"));
  }

  async decide(toolCallId, approve, message, controls) {
    controls.approve.disabled = controls.deny.disabled = controls.message.disabled = true;
    controls.failure.hidden = true;
    const decision = { toolCallId, approve };
    if (message) decision.message = message;
    try {
      const answer = await json(`/api/v1/agent/runs/${encodeURIComponent(this.runId)}/approvals`, {
        method: "POST",
        body: { decisions: [decision] },
      });
      const parts = this.cards.get(toolCallId);
      if (parts && parts.card.classList.contains("waiting")) {
        // approval_decided is on its way on the stream; until then, say what was sent
        parts.status.textContent = approve ? "approved" : "denied";
        if (answer.status === "waiting") parts.status.textContent += " · other calls of this round still wait";
      }
    } catch (failure) {
      const pending = failure.code !== "approval_not_pending" && failure.code !== "run_not_found";
      controls.approve.disabled = controls.deny.disabled = controls.message.disabled = !pending;
      controls.failure.hidden = false;
      controls.failure.textContent =
        failure.code === "approval_not_pending"
          ? `This call is no longer waiting (decided already, or the run ended): ${failure.message}`
          : `The decision was not taken: ${failure.message}`;
    }
  }

  approvalDecided(data) {
    const parts = this.cards.get(data.toolCallId);
    if (!parts) return;
    parts.card.classList.remove("waiting");
    parts.approval.replaceChildren(approvalDecision(data));
    parts.status.textContent = data.approve ? "approved · running…" : "denied";
    hooks.onWaitingChanged(); // no longer waiting
  }

  // A running call's server asks the person a question: a form on its card (input-form.js). The run waits in the
  // store as for an approval; input_decided, then the call's result, come on this stream.
  inputRequired(data) {
    const parts = this.cards.get(data.toolCallId) || this.toolCall(data.toolCallId, data.name, {});
    parts.card.classList.add("waiting");
    parts.card.open = true;
    parts.status.textContent = "waiting for your answer";
    const box = questionBox(
      data,
      (action, content) => this.answerInput(data.inputId, action, content),
      (refusal) => refusal.code === "input_not_pending" || refusal.code === "run_not_found",
    );
    const asked = this.questionOf(parts, data.inputId);
    if (asked) asked.replaceWith(box);
    else parts.approval.appendChild(box);
    hooks.onWaitingChanged(); // the page may be left, and the list marks the conversation as waiting
  }

  questionOf(parts, inputId) {
    return [...parts.approval.querySelectorAll(".question")].find((box) => box.dataset.inputId === inputId);
  }

  async answerInput(inputId, action, content) {
    const answer = { inputId, action };
    if (content !== undefined) answer.content = content;
    try {
      await json(`/api/v1/agent/runs/${encodeURIComponent(this.runId)}/inputs`, {
        method: "POST",
        body: { inputs: [answer] },
      });
    } catch (failure) {
      const lead = {
        input_not_pending: "This question is no longer waiting (answered already, or the run ended)",
        invalid_input: "The answer does not fit the question",
      }[failure.code];
      const said = new Error(`${lead || "The answer was not sent"}: ${failure.message}`);
      throw Object.assign(said, { code: failure.code });
    }
    // input_decided is on its way on the stream; the box stays (disabled) until then.
  }

  inputDecided(data) {
    const parts = this.cards.get(data.toolCallId);
    if (!parts) return;
    const box = this.questionOf(parts, data.inputId);
    const decision = questionDecision(data);
    if (box) box.replaceWith(decision);
    else parts.approval.appendChild(decision);
    if (!parts.approval.querySelector(".question")) {
      parts.card.classList.remove("waiting");
      parts.status.textContent = data.action === "accept" ? "answered · running…" : `${data.action}d · running…`;
    }
    hooks.onWaitingChanged(); // no longer waiting
  }

  // The call's server needs a consent nobody gave: it was not called (its result says so). A per-user server's
  // Connect asks this person's consent and opens it; their connections are read again when they come back. A
  // machine server's is an administrator's to give: the box says so.
  authorizationRequired(data) {
    const parts = this.cards.get(data.toolCallId) || this.toolCall(data.toolCallId, data.name, {});
    parts.approval.appendChild(consentPrompt(data, () => hooks.connections.load()));
    if (data.tokens === "perUser") hooks.connections.wanted(data.server);
  }

  toolProgress(data) {
    const parts = this.cards.get(data.toolCallId);
    if (!parts) return;
    parts.progress.hidden = false;
    const amount = data.total ? `${data.progress} / ${data.total}` : String(data.progress);
    parts.progress.textContent = "Progress: " + amount + (data.message ? " — " + data.message : "");
  }

  // ``images``: a live result's [{mimeType, sizeBytes}] (the stream carries no bytes); ``urls``: a stored
  // result's images, by reference.
  toolResult(toolCallId, content, isError, durationMs, images, urls) {
    const parts = this.cards.get(toolCallId) || this.toolCall(toolCallId, "tool", {});
    parts.card.classList.remove("running", "waiting");
    parts.card.classList.add(isError ? "failed" : "succeeded");
    parts.progress.hidden = true;
    const seconds = typeof durationMs === "number" ? ` · ${formatDuration(durationMs)}` : "";
    parts.status.textContent = (isError ? "error" : "done") + seconds;
    const text = String(content ?? "");
    const pre = el("pre", "tool-result" + (isError ? " error" : ""), text);
    const long = text.length > LONG_RESULT_CHARS || text.split("\n").length > LONG_RESULT_LINES;
    if (long) {
      const details = el("details", "long-result");
      details.appendChild(el("summary", null, `Result (${text.length.toLocaleString()} characters)`));
      details.appendChild(pre);
      parts.result.replaceChildren(details);
    } else {
      parts.result.replaceChildren(el("div", "tool-label", isError ? "Error" : "Result"), pre);
    }
    if (images && images.length) {
      const told = images.map((image) => `${image.mimeType} · ${formatBytes(image.sizeBytes)}`).join(", ");
      const line = el("div", "tool-images", `${images.length} image${images.length === 1 ? "" : "s"}: ${told}`);
      line.title = "The images went to the model; the conversation keeps them.";
      parts.result.appendChild(line);
    }
    if (urls && urls.length) {
      parts.result.appendChild(el("div", "tool-label", urls.length === 1 ? "Image" : "Images"));
      parts.result.appendChild(imageStrip(urls, `An image returned by ${parts.name}`));
    }
  }

  // Calls still open when the run ends got no result event (a cancelled run answers them in its store only).
  closeOpenCards(why) {
    for (const parts of this.cards.values()) {
      if (!parts.card.classList.contains("running")) continue;
      parts.card.classList.remove("waiting");
      parts.card.classList.replace("running", "failed");
      parts.progress.hidden = true;
      parts.approval.replaceChildren(); // no decision is taken any more
      parts.status.textContent = why;
    }
  }

  finish(finishReason, iterations, usage) {
    this.ended = true;
    this.renderPendingTexts();
    this.closeOpenCards(finishReason === "cancelled" ? "cancelled" : "no result");
    const footer = el("div", "run-footer");
    const pieces = [`finish: ${finishReason}`];
    if (iterations !== undefined) pieces.push(`${iterations} iteration${iterations === 1 ? "" : "s"}`);
    if (usage) pieces.push(`${usage.inputTokens ?? 0} in / ${usage.outputTokens ?? 0} out tokens`);
    footer.textContent = pieces.join(" · ");
    if (finishReason === "cancelled") footer.classList.add("cancelled");
    this.root.appendChild(footer);
  }

  error(code, message) {
    this.ended = true;
    this.renderPendingTexts();
    this.closeOpenCards("no result");
    const box = el("div", "run-error");
    box.setAttribute("role", "alert");
    box.appendChild(el("strong", null, `Error (${code}): `));
    box.appendChild(document.createTextNode(message || "the run failed."));
    this.root.appendChild(box);
  }
}

function compactedText(data) {
  const folded = `${data.messagesFolded} earlier message${data.messagesFolded === 1 ? "" : "s"}`;
  const tokens = `${Number(data.tokensBefore).toLocaleString()} → ${Number(data.tokensAfter).toLocaleString()} tokens`;
  return `Context compacted: ${folded} folded into a summary for the model (${tokens}); the conversation keeps them all.`;
}

function formatDuration(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}
