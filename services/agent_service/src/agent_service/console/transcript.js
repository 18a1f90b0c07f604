// The transcript: the conversation's messages and runs, one under the other, kept scrolled to the newest; the user's
// messages, and the notes and errors that belong to no run.
import { el } from "./dom.js";
import { imageStrip, imagesOf, textOf } from "./images.js";

export const transcript = document.getElementById("transcript");

export function scrollToEnd() {
  transcript.scrollTop = transcript.scrollHeight;
}

export function addUserMessage(content) {
  const bubble = el("div", "message user");
  bubble.appendChild(el("div", "role", "You"));
  const text = textOf(content);
  const images = imagesOf(content);
  if (text || !images.length) bubble.appendChild(el("div", "user-text", text));
  if (images.length) bubble.appendChild(imageStrip(images, "An image of your message"));
  transcript.appendChild(bubble);
  scrollToEnd();
}

export function showNote(text) {
  transcript.appendChild(el("div", "note standalone", text));
  scrollToEnd();
}

export function showError(text) {
  const box = el("div", "run-error standalone", text);
  box.setAttribute("role", "alert");
  transcript.appendChild(box);
  scrollToEnd();
}
