// The composer: the message box, the images attached to the next message, and the suggestion cards a new
// conversation offers; each of them sends through ``send`` (runs.js), given by initComposer.
import { json } from "./api.js";
import { el, formFailure } from "./dom.js";
import { formatBytes, thumbnail } from "./images.js";

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]); // what the agent API takes
// A guard against reading a huge file into the page only: the service's per-run cap (AGENT_RUN_IMAGES_MAX_BYTES,
// 20 MiB by default) decides, and its 413 images_too_large is shown as any refusal.
const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

const $ = (id) => document.getElementById(id);
const ui = {
  suggestions: $("suggestions"),
  composer: $("composer"),
  message: $("message"),
  attachments: $("attachments"),
  attachError: $("attach-error"),
  attach: $("attach"),
  attachFile: $("attach-file"),
};

const state = {
  attachments: [], // images for the next message: [{name, type, size, url}] (url: a data: URL)
  send: null, // starts a run of a message (runs.js)
};

export async function loadSuggestions() {
  try {
    const body = await json("/api/v1/agent/console/suggestions");
    ui.suggestions.replaceChildren(
      ...(body.suggestions || []).map((suggestion) => {
        const card = el("button", "suggestion", suggestion.title);
        card.type = "button";
        card.title = suggestion.prompt;
        card.addEventListener("click", () => state.send(suggestion.prompt));
        return card;
      }),
    );
  } catch {
    ui.suggestions.replaceChildren(); // no cards: the page works without them
  }
}

// The message's content: its text, or (with images attached) its parts, the text first.
export function messageContent(text) {
  if (!state.attachments.length) return text;
  const parts = text.trim() ? [{ type: "text", text }] : [];
  for (const image of state.attachments) parts.push({ type: "image_url", image_url: { url: image.url } });
  return parts;
}

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

export function hasAttachments() {
  return state.attachments.length > 0;
}

// The message was sent: the box is emptied and its images are taken off.
export function clearComposer() {
  ui.message.value = "";
  setAttachments([]);
  formFailure(ui.attachError, "");
}

export function focusMessage() {
  ui.message.focus();
}

export function initComposer({ send }) {
  state.send = send;
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
  ui.attach.addEventListener("click", () => ui.attachFile.click());
  ui.attachFile.addEventListener("change", async () => {
    const files = [...ui.attachFile.files];
    ui.attachFile.value = ""; // the same file may be picked again
    await attachFiles(files);
    ui.message.focus();
  });
}
