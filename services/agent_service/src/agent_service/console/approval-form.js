// A tool call that waits for a person's approval (the run's approval_required event): Approve or Deny, with a message
// for the model, on its card; and the decision once taken (approval_decided). Turn (turn.js) posts the decision.
import { el } from "./dom.js";

// ``decide(approve, message, controls)``: called on Approve or Deny with the message typed (trimmed) and the
// form's controls, which it disables while the decision is sent and uses to say a refusal.
export function approvalBox(data, decide) {
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
  const decided = (yes) => decide(yes, message.value.trim(), { approve, deny, message, failure });
  approve.addEventListener("click", () => decided(true));
  deny.addEventListener("click", () => decided(false));
  return box;
}

// What was decided, and by whom, in place of the form.
export function approvalDecision(data) {
  const who = data.decidedBy ? ` by ${data.decidedBy}` : "";
  let text = data.approve ? `Approved${who}.` : `Denied${who}`;
  if (!data.approve) text += data.message ? `: ${data.message}` : ".";
  else if (data.message) text += ` ${data.message}`;
  return el("p", "approval-decision " + (data.approve ? "approved" : "denied"), text);
}
