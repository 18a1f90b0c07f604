// The agent console: a chat over agent-service's own API (same origin), no build step, no libraries.
// Everything shown from the model, the tools or the store goes in through textContent or createTextNode:
// no string from them is ever parsed as HTML (see renderMarkdown).
// An ES module (index.html loads it with type="module"): the API, Markdown, the question form, the Servers,
// Connections and Runtime sections are modules of their own beside it.
import { api, json, readEvents } from "./api.js";
import { consentPrompt } from "./authorization.js";
import { initConnections } from "./connections.js";
import { el, formFailure } from "./dom.js";
import { questionBox, questionDecision } from "./input-form.js";
import { renderMarkdown } from "./markdown.js";
import { initRuntime } from "./runtime.js";
import { initServers } from "./servers.js";

(() => {
  const INFLIGHT_STORE = "console.inflight"; // {runId, conversationId} while a run streams
  const CONVERSATION_STORE = "console.conversation";
  const MODEL_STORE = "console.model"; // the model of a new conversation; a stored one keeps its own (its settings)
  const LONG_RESULT_CHARS = 800;
  const LONG_RESULT_LINES = 16;
  const MAX_REATTACHES = 5;
  const MOVED_RUN_CODES = new Set(["shutting_down", "run_moved"]); // the run goes on on another instance
  const RENDER_EVERY_MS = 50; // a streamed answer's Markdown is rendered again at most this often
  const OTHER_MODEL = "\u0000other"; // the picker's "Other…" entry: a name typed in (the list omits patterns)
  const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]); // what the agent API takes
  // A guard against reading a huge file into the page only: the service's per-run cap (AGENT_RUN_IMAGES_MAX_BYTES,
  // 20 MiB by default) decides, and its 413 images_too_large is shown as any refusal.
  const MAX_IMAGE_BYTES = 20 * 1024 * 1024;
  const STORED_IMAGE = /^\/api\/v1\/agent\/images\/[0-9a-f]{64}$/; // a stored run keeps its images by reference

  const $ = (id) => document.getElementById(id);
  const ui = {
    side: $("side"),
    toggleSide: $("toggle-side"),
    model: $("model"),
    modelOther: $("model-other"),
    newConversation: $("new-conversation"),
    conversations: $("conversations"),
    conversationsNote: $("conversations-note"),
    tools: $("tools"),
    toolsNote: $("tools-note"),
    persona: $("persona"),
    personaNote: $("persona-note"),
    effort: $("effort"),
    verbosity: $("verbosity"),
    maxTokens: $("max-tokens"),
    newChat: $("new-chat"),
    systemPromptBox: $("system-prompt-box"),
    systemPrompt: $("system-prompt"),
    suggestions: $("suggestions"),
    transcript: $("transcript"),
    composer: $("composer"),
    message: $("message"),
    attachments: $("attachments"),
    attachError: $("attach-error"),
    attach: $("attach"),
    attachFile: $("attach-file"),
    send: $("send"),
    stop: $("stop"),
    keyForm: $("key-form"),
  };

  const state = {
    conversationId: sessionStorage.getItem(CONVERSATION_STORE) || newConversationId(),
    runId: null, // the run in flight, if any
    abort: null, // closes the run's stream: how a run that is not stored is stopped, and a waiting run left
    turn: null, // the Turn of the run in flight
    leaving: null, // while a waiting run is left: resolves once its stream has closed
    unstored: false, // agent-service keeps no runs (AGENT_DATABASE_URL empty): no conversations, no re-attach
    tools: [], // [{name, description, server, title, unavailable}]
    // The tools switched off: the conversation's (its stored settings' tools), not this tab's; a new conversation
    // starts with those of the one shown before.
    disabledTools: new Set(),
    personas: new Map(), // name -> {name, description, model, systemPrompt}
    tenantPrompt: null, // the tenant's system prompt: a conversation without a persona's starts with it
    fresh: true, // nothing of the conversation is stored yet: its first message carries the system prompt
    promptEdited: false, // the system prompt was typed in: a persona picked later does not replace it
    attachments: [], // images for the next message: [{name, type, size, url}] (url: a data: URL)
  };

  function scrollToEnd() {
    ui.transcript.scrollTop = ui.transcript.scrollHeight;
  }

  function newConversationId() {
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // --- images ---------------------------------------------------------------------------------------
  // A message's content is its text, or a list of parts: {type: "text", text} and {type: "image_url",
  // image_url: {url}}. A stored image (/api/v1/agent/images/<sha256>) needs the key: it is fetched and shown from
  // an object URL (the page's policy allows images from this origin, data: and blob: only; an https image is
  // named by a link, never loaded).

  function textOf(content) {
    if (Array.isArray(content)) {
      return content
        .filter((part) => part && part.type === "text")
        .map((part) => part.text)
        .join("\n");
    }
    return String(content ?? "");
  }

  function imagesOf(content) {
    if (!Array.isArray(content)) return [];
    return content.filter((part) => part && part.type === "image_url" && part.image_url).map((part) => part.image_url.url);
  }

  const storedImages = new Map(); // stored image path -> Promise of its object URL (each fetched once a page)

  function storedImageUrl(path) {
    if (!storedImages.has(path)) {
      const loading = api(path)
        .then((response) => response.blob())
        .then((blob) => URL.createObjectURL(blob));
      loading.catch(() => storedImages.delete(path)); // a failure is tried again next time it is shown
      storedImages.set(path, loading);
    }
    return storedImages.get(path);
  }

  // The images of a message, as thumbnails (a click shows the picture whole, another click small again).
  function imageStrip(urls, alt) {
    const strip = el("div", "message-images");
    for (const url of urls) {
      if (url.startsWith("data:image/")) {
        strip.appendChild(thumbnail(url, alt));
      } else if (STORED_IMAGE.test(url)) {
        const slot = el("span", "image-loading", "loading image…");
        strip.appendChild(slot);
        storedImageUrl(url).then(
          (objectUrl) => slot.replaceWith(thumbnail(objectUrl, alt, url)),
          (failure) => {
            slot.className = "image-missing";
            slot.textContent = `image unavailable (${failure.code || "network"})`;
          },
        );
      } else if (/^https:\/\//.test(url)) {
        const link = el("a", "image-link", url);
        link.href = url;
        link.rel = "noopener noreferrer";
        link.target = "_blank";
        strip.appendChild(link);
      }
    }
    return strip;
  }

  function thumbnail(src, alt, stored) {
    const image = el("img", "message-image");
    image.src = src;
    image.alt = alt;
    if (stored) image.dataset.stored = stored;
    image.addEventListener("click", () => image.classList.toggle("whole"));
    return image;
  }

  function formatBytes(bytes) {
    if (bytes < 1024) return `${bytes} B`;
    if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
    return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  }

  // --- a turn: one run's view -----------------------------------------------------------------------

  function addUserMessage(content) {
    const bubble = el("div", "message user");
    bubble.appendChild(el("div", "role", "You"));
    const text = textOf(content);
    const images = imagesOf(content);
    if (text || !images.length) bubble.appendChild(el("div", "user-text", text));
    if (images.length) bubble.appendChild(imageStrip(images, "An image of your message"));
    ui.transcript.appendChild(bubble);
    scrollToEnd();
  }

  class Turn {
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
      ui.transcript.appendChild(this.root);
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
      const box = el("div", "approval");
      box.setAttribute("role", "group");
      box.setAttribute("aria-label", `Approval of ${data.name}`);
      const until = data.expiresAt ? ` It is denied if no one decides by ${new Date(data.expiresAt).toLocaleString()}.` : "";
      const server = data.server ? ` (server ${data.server})` : "";
      const text = `This call of ${data.name}${server} needs your approval.${until} The run waits for it: you may leave ` +
        "it and come back from the conversations list.";
      box.appendChild(el("p", "approval-text", text));
      const message = el("input", "approval-message");
      message.type = "text";
      message.maxLength = 2000;
      message.placeholder = "Message for the model (optional)";
      message.setAttribute("aria-label", `Message with the decision on ${data.name}`);
      const approve = el("button", "approve", "Approve");
      approve.type = "button";
      const deny = el("button", "deny danger", "Deny");
      deny.type = "button";
      const failure = el("p", "form-error");
      failure.setAttribute("role", "alert");
      failure.hidden = true;
      const buttons = el("div", "approval-buttons");
      buttons.append(approve, deny);
      box.append(message, buttons, failure);
      const decide = (yes) => this.decide(data.toolCallId, yes, message.value.trim(), { approve, deny, message, failure });
      approve.addEventListener("click", () => decide(true));
      deny.addEventListener("click", () => decide(false));
      parts.approval.replaceChildren(box);
      syncLeave();
      refreshConversations(); // the list marks the conversation as waiting
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
      const who = data.decidedBy ? ` by ${data.decidedBy}` : "";
      let text = data.approve ? `Approved${who}.` : `Denied${who}`;
      if (!data.approve) text += data.message ? `: ${data.message}` : ".";
      else if (data.message) text += ` ${data.message}`;
      parts.approval.replaceChildren(el("p", "approval-decision " + (data.approve ? "approved" : "denied"), text));
      parts.status.textContent = data.approve ? "approved · running…" : "denied";
      syncLeave();
      refreshConversations(); // no longer waiting
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
      syncLeave();
      refreshConversations(); // the list marks the conversation as waiting
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
      syncLeave();
      refreshConversations(); // no longer waiting
    }

    // The call's server needs a consent nobody gave: it was not called (its result says so). A per-user server's
    // Connect asks this person's consent and opens it; their connections are read again when they come back. A
    // machine server's is an administrator's to give: the box says so.
    authorizationRequired(data) {
      const parts = this.cards.get(data.toolCallId) || this.toolCall(data.toolCallId, data.name, {});
      parts.approval.appendChild(consentPrompt(data, () => connections.load()));
      if (data.tokens === "perUser") connections.wanted(data.server);
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

  function showNote(text) {
    ui.transcript.appendChild(el("div", "note standalone", text));
    scrollToEnd();
  }

  function showError(text) {
    const box = el("div", "run-error standalone", text);
    box.setAttribute("role", "alert");
    ui.transcript.appendChild(box);
    scrollToEnd();
  }

  // --- stored conversations -------------------------------------------------------------------------

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
    ui.transcript.replaceChildren();
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
    ui.newChat.hidden = true;
    applySettings(conversation.settings);
    if (conversation.settings && conversation.settings.systemPrompt) {
      const prompt = el("details", "system-prompt-shown");
      prompt.appendChild(el("summary", null, "System prompt"));
      prompt.appendChild(el("div", "system-prompt-text", conversation.settings.systemPrompt));
      ui.transcript.appendChild(prompt);
    }
    let messages = conversation.messages || [];
    let runs = conversation.runs || [];
    if (conversation.earlier) {
      // The newest page only: a long conversation is never loaded whole (the API answers it in pages).
      ui.transcript.appendChild(el("p", "note standalone", "Earlier messages of this conversation are not shown."));
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

  // Follows a run already under way (started before a reload, or in another tab) from its first event.
  async function replay(active, conversationId) {
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

  async function showConversation(conversationId) {
    const active = await loadConversation(conversationId);
    document.body.dataset.ready = "true"; // for tests and scripts: the page shows what is stored
    if (active) await replay(active, conversationId);
  }

  async function refreshConversations() {
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

  function markCurrentConversation() {
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

  // --- models and tools -----------------------------------------------------------------------------

  async function loadModels() {
    try {
      const body = await json("/v1/models");
      const ids = (body.data || []).map((model) => model.id);
      const wanted = localStorage.getItem(MODEL_STORE) || "";
      const options = ids.map((id) => Object.assign(el("option", null, id), { value: id }));
      options.push(Object.assign(el("option", null, "Other…"), { value: OTHER_MODEL }));
      ui.model.replaceChildren(...options);
      if (ids.includes(wanted)) ui.model.value = wanted;
      else if (wanted) {
        ui.model.value = OTHER_MODEL;
        ui.modelOther.value = wanted;
      } else ui.model.value = ids.includes("demo") ? "demo" : ids[0] || OTHER_MODEL;
    } catch (failure) {
      showError(`Could not list the models: ${failure.message}`);
    }
    ui.modelOther.hidden = ui.model.value !== OTHER_MODEL;
  }

  // Completion-service routes more names than it lists (``openai/<model>``, bare names): "Other…" takes one.
  function chosenModel() {
    return ui.model.value === OTHER_MODEL ? ui.modelOther.value.trim() : ui.model.value;
  }

  function setModel(name) {
    if ([...ui.model.options].some((option) => option.value === name)) {
      ui.model.value = name;
    } else {
      ui.model.value = OTHER_MODEL;
      ui.modelOther.value = name;
    }
    ui.modelOther.hidden = ui.model.value !== OTHER_MODEL;
  }

  function rememberModel() {
    ui.modelOther.hidden = ui.model.value !== OTHER_MODEL;
    localStorage.setItem(MODEL_STORE, chosenModel());
  }

  async function loadTools() {
    try {
      const body = await json("/api/v1/agent/tools");
      state.tools = body.tools || [];
    } catch (failure) {
      ui.toolsNote.hidden = false;
      ui.toolsNote.textContent = `Tools unavailable: ${failure.message}`;
      return;
    }
    renderTools();
  }

  // The switches, from ``state.disabledTools``.
  function renderTools() {
    const servers = new Map();
    for (const tool of state.tools) {
      const server = tool.server || "tools";
      if (!servers.has(server)) servers.set(server, []);
      servers.get(server).push(tool);
    }
    const groups = [];
    for (const [server, tools] of servers) {
      const group = el("fieldset", "tool-group");
      group.dataset.server = server;
      const legend = el("legend");
      const all = el("input");
      all.type = "checkbox";
      all.className = "server-switch";
      all.setAttribute("aria-label", `All tools of ${server}`);
      legend.append(all, document.createTextNode(" " + server));
      group.appendChild(legend);
      const switches = tools.map((tool) => {
        const label = el("label", "tool-switch" + (tool.unavailable ? " unavailable" : ""));
        const heading = tool.title && tool.title !== tool.name ? tool.title + ": " : "";
        label.title = heading + (tool.description || "") + (tool.unavailable ? " (unavailable for now)" : "");
        const box = el("input");
        box.type = "checkbox";
        box.name = "tool";
        box.value = tool.name;
        box.checked = !state.disabledTools.has(tool.name);
        box.addEventListener("change", () => {
          setTool(tool.name, box.checked);
          syncServerSwitch(all, switches);
        });
        label.append(box, document.createTextNode(" " + tool.name));
        group.appendChild(label);
        return box;
      });
      all.addEventListener("change", () => {
        for (const box of switches) {
          box.checked = all.checked;
          setTool(box.value, all.checked);
        }
        syncServerSwitch(all, switches);
      });
      syncServerSwitch(all, switches);
      groups.push(group);
    }
    ui.tools.replaceChildren(...groups);
    ui.toolsNote.hidden = state.tools.length > 0;
    ui.toolsNote.textContent = "No tools are configured.";
  }

  function syncServerSwitch(all, switches) {
    const on = switches.filter((box) => box.checked).length;
    all.checked = on === switches.length;
    all.indeterminate = on > 0 && on < switches.length;
  }

  function setTool(name, on) {
    if (on) state.disabledTools.delete(name);
    else state.disabledTools.add(name);
  }

  // The run's ``tools``: omitted when every tool is on (the service then offers what is available now).
  function chosenTools() {
    const names = state.tools.map((tool) => tool.name);
    if (!names.some((name) => state.disabledTools.has(name))) return undefined;
    return names.filter((name) => !state.disabledTools.has(name));
  }

  // --- personas, generation settings, suggestions -------------------------------------------------------

  async function loadPersonas() {
    try {
      const body = await json("/api/v1/agent/personas");
      state.tenantPrompt = body.systemPrompt || null;
      const personas = body.personas || [];
      state.personas = new Map(personas.map((persona) => [persona.name, persona]));
      const options = personas.map((persona) => {
        const option = el("option", null, persona.description ? `${persona.name}: ${persona.description}` : persona.name);
        option.value = persona.name;
        return option;
      });
      ui.persona.replaceChildren(Object.assign(el("option", null, "None"), { value: "" }), ...options);
    } catch (failure) {
      ui.personaNote.hidden = false;
      ui.personaNote.textContent = `Personas unavailable: ${failure.message}`;
    }
  }

  // The system prompt a new conversation of the persona picked starts with: its own, else the tenant's.
  function defaultPrompt() {
    const persona = state.personas.get(ui.persona.value);
    return (persona && persona.systemPrompt) || state.tenantPrompt || "";
  }

  function choosePersona() {
    const persona = state.personas.get(ui.persona.value);
    if (persona && persona.model) setModel(persona.model);
    if (!state.promptEdited) ui.systemPrompt.value = defaultPrompt();
  }

  async function loadSuggestions() {
    try {
      const body = await json("/api/v1/agent/console/suggestions");
      ui.suggestions.replaceChildren(
        ...(body.suggestions || []).map((suggestion) => {
          const card = el("button", "suggestion", suggestion.title);
          card.type = "button";
          card.title = suggestion.prompt;
          card.addEventListener("click", () => send(suggestion.prompt));
          return card;
        }),
      );
    } catch {
      ui.suggestions.replaceChildren(); // no cards: the page works without them
    }
  }

  // A conversation with nothing stored: its system prompt may be set, and the suggestions are offered.
  function startFresh() {
    state.fresh = true;
    state.promptEdited = false;
    ui.systemPrompt.value = defaultPrompt();
    ui.newChat.hidden = false;
  }

  // The controls from a stored conversation's settings (what its newest run asked for); none: they stay.
  function applySettings(settings) {
    if (!settings) return;
    ui.persona.value = settings.persona && state.personas.has(settings.persona) ? settings.persona : "";
    if (settings.model) setModel(settings.model);
    ui.effort.value = (settings.reasoning && settings.reasoning.effort) || "";
    ui.verbosity.value = settings.verbosity || "";
    ui.maxTokens.value = settings.maxTokens ? String(settings.maxTokens) : "";
    const allowed = settings.tools ? new Set(settings.tools) : null;
    state.disabledTools = new Set(state.tools.map((tool) => tool.name).filter((name) => allowed && !allowed.has(name)));
    if (state.tools.length) renderTools(); // none listed (the gateway is away): its note stays
  }

  // What the run asks for besides its messages: the settings its conversation then keeps.
  function chosenSettings() {
    const settings = {};
    if (ui.persona.value) settings.persona = ui.persona.value;
    if (ui.effort.value) settings.reasoning = { effort: ui.effort.value, summary: "auto" };
    if (ui.verbosity.value) settings.verbosity = ui.verbosity.value;
    const maxTokens = Number(ui.maxTokens.value);
    if (ui.maxTokens.value.trim() && Number.isInteger(maxTokens) && maxTokens >= 1) settings.maxTokens = maxTokens;
    return settings;
  }

  // --- running ------------------------------------------------------------------------------------

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
  function syncLeave() {
    ui.newConversation.disabled = Boolean(state.runId) && !(state.turn && state.turn.waiting());
  }

  // Closes the stream of a waiting run; answers whether the page is free for another conversation.
  async function leaveWaitingRun() {
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
    refreshConversations();
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

  // The message's content: its text, or (with images attached) its parts, the text first.
  function messageContent(text) {
    if (!state.attachments.length) return text;
    const parts = text.trim() ? [{ type: "text", text }] : [];
    for (const image of state.attachments) parts.push({ type: "image_url", image_url: { url: image.url } });
    return parts;
  }

  async function send(text) {
    if (state.runId || (!text.trim() && !state.attachments.length)) return;
    if (!chosenModel()) {
      showError("Type a model name first (the picker's Other… entry).");
      ui.modelOther.focus();
      return;
    }
    const conversationId = state.conversationId;
    sessionStorage.setItem(CONVERSATION_STORE, conversationId);
    const prompt = state.fresh ? ui.systemPrompt.value.trim() : "";
    ui.newChat.hidden = true;
    const content = messageContent(text);
    addUserMessage(content);
    ui.message.value = "";
    setAttachments([]);
    formFailure(ui.attachError, "");
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

  // --- attaching images ------------------------------------------------------------------------------

  function readAsDataUrl(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.addEventListener("load", () => resolve(reader.result));
      reader.addEventListener("error", () => reject(reader.error));
      reader.readAsDataURL(file);
    });
  }

  async function attachFiles(files) {
    const refused = [];
    const added = [];
    for (const file of files) {
      if (!IMAGE_TYPES.has(file.type)) refused.push(`${file.name}: not a PNG, JPEG, GIF or WebP image`);
      else if (file.size > MAX_IMAGE_BYTES) refused.push(`${file.name}: larger than ${formatBytes(MAX_IMAGE_BYTES)}`);
      else {
        try {
          added.push({ name: file.name, type: file.type, size: file.size, url: await readAsDataUrl(file) });
        } catch (failure) {
          refused.push(`${file.name}: could not be read (${failure.message})`);
        }
      }
    }
    formFailure(ui.attachError, refused.length ? `Not attached: ${refused.join("; ")}.` : "");
    setAttachments([...state.attachments, ...added]);
  }

  // The images the next message carries, each with a button that takes it off again.
  function setAttachments(attachments) {
    state.attachments = attachments;
    ui.attachments.replaceChildren(
      ...attachments.map((image, index) => {
        const item = el("li", "attachment");
        item.appendChild(thumbnail(image.url, image.name));
        item.appendChild(el("span", "attachment-name", `${image.name} · ${formatBytes(image.size)}`));
        const remove = el("button", "small-button", "Remove");
        remove.type = "button";
        remove.setAttribute("aria-label", `Remove ${image.name}`);
        remove.addEventListener("click", () => {
          setAttachments(state.attachments.filter((_, at) => at !== index));
          ui.message.focus();
        });
        item.appendChild(remove);
        return item;
      }),
    );
    ui.attachments.hidden = attachments.length === 0;
  }

  // --- wiring -----------------------------------------------------------------------------------------

  function closeSideOnPhone() {
    document.body.classList.remove("side-open");
    ui.toggleSide.setAttribute("aria-expanded", "false");
  }

  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send(ui.message.value);
  });
  ui.message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send(ui.message.value);
    }
  });
  ui.stop.addEventListener("click", stop);
  ui.attach.addEventListener("click", () => ui.attachFile.click());
  ui.attachFile.addEventListener("change", async () => {
    const files = [...ui.attachFile.files];
    ui.attachFile.value = ""; // the same file may be picked again
    await attachFiles(files);
    ui.message.focus();
  });
  ui.model.addEventListener("change", () => {
    rememberModel();
    if (!ui.modelOther.hidden) ui.modelOther.focus();
  });
  ui.modelOther.addEventListener("change", rememberModel);
  ui.newConversation.addEventListener("click", async () => {
    if (!(await leaveWaitingRun())) return;
    state.conversationId = newConversationId();
    sessionStorage.setItem(CONVERSATION_STORE, state.conversationId);
    ui.transcript.replaceChildren();
    startFresh();
    markCurrentConversation();
    closeSideOnPhone();
    ui.message.focus();
  });
  ui.persona.addEventListener("change", choosePersona);
  ui.systemPrompt.addEventListener("input", () => {
    state.promptEdited = true;
  });
  ui.toggleSide.addEventListener("click", () => {
    const open = document.body.classList.toggle("side-open");
    ui.toggleSide.setAttribute("aria-expanded", String(open));
  });
  ui.keyForm.addEventListener("submit", () => {
    // method="dialog" closes the dialog; the close handler reads the key
  });
  const loadServers = initServers({ onToolsChanged: loadTools });
  const loadRuntime = initRuntime();
  const connections = initConnections();

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
})();
