// A tool's server asked its user a question (MCP elicitation, the run's input_required event): a form built from the
// question's requestedSchema, an object of flat properties (MCP form mode: string, number, integer, boolean, and
// enums of strings), each with its title, description, default (pre-filled) and whether it is required (marked).
// Accept sends what the form holds, Decline and Cancel send nothing of it. agent-service checks the answer against
// the schema once more (400 invalid_input), defaults filled for what the form left empty: the form only helps.
import { button, el, errorLine, formFailure } from "./dom.js";

let fieldIds = 0; // ids that tie a field to its description

// The choices of an enum property, [{value, label}]: ``enum`` (with ``enumNames``, their labels) or ``oneOf`` /
// ``anyOf`` of ``{const, title}``; null: not an enum.
function choicesOf(schema) {
  if (Array.isArray(schema.enum)) {
    const names = Array.isArray(schema.enumNames) ? schema.enumNames : [];
    return schema.enum.map((value, index) => ({ value: String(value), label: String(names[index] ?? value) }));
  }
  const options = schema.oneOf || schema.anyOf;
  if (Array.isArray(options) && options.length && options.every((option) => option && "const" in option)) {
    return options.map((option) => ({ value: String(option.const), label: String(option.title ?? option.const) }));
  }
  return null;
}

// One property's field: {node, read} where read() answers {present, value} (an empty text or number: absent).
function fieldOf(name, schema, required) {
  const id = `question-field-${++fieldIds}`;
  const title = schema.title || name;
  const label = el("label", "question-field");
  label.dataset.property = name;
  const caption = el("span", "question-label", title);
  if (required) caption.appendChild(el("span", "required-mark", " (required)"));
  let input;
  let read;
  const choices = choicesOf(schema);
  if (choices) {
    input = el("select");
    const hasDefault = schema.default !== undefined;
    if (!required || !hasDefault) input.appendChild(Object.assign(el("option", null, "—"), { value: "" }));
    for (const choice of choices) input.appendChild(Object.assign(el("option", null, choice.label), { value: choice.value }));
    input.value = hasDefault ? String(schema.default) : "";
    read = () => (input.value === "" ? { present: false } : { present: true, value: input.value });
  } else if (schema.type === "boolean") {
    input = el("input");
    input.type = "checkbox";
    input.checked = schema.default === true;
    label.classList.add("question-boolean");
    read = () => ({ present: true, value: input.checked });
  } else if (schema.type === "number" || schema.type === "integer") {
    input = el("input");
    input.type = "number";
    input.step = schema.type === "integer" ? "1" : "any";
    if (typeof schema.minimum === "number") input.min = String(schema.minimum);
    if (typeof schema.maximum === "number") input.max = String(schema.maximum);
    if (typeof schema.default === "number") input.value = String(schema.default);
    read = () => (input.value.trim() === "" ? { present: false } : { present: true, value: Number(input.value) });
  } else if (schema.type === "string") {
    input = el("input");
    input.type = { email: "email", uri: "url", date: "date" }[schema.format] || "text";
    if (Number.isInteger(schema.minLength)) input.minLength = schema.minLength;
    if (Number.isInteger(schema.maxLength)) input.maxLength = schema.maxLength;
    if (typeof schema.default === "string") input.value = schema.default;
    input.autocomplete = "off";
    read = () => (input.value === "" ? { present: false } : { present: true, value: input.value });
  } else {
    // Not a form mode property (MCP allows none other): it cannot be answered here.
    label.appendChild(caption);
    label.appendChild(el("span", "note", `asks for ${schema.type || "a value"} this form cannot take`));
    return { node: label, read: () => ({ present: false }), unsupported: required };
  }
  input.name = name;
  input.required = required && schema.type !== "boolean";
  if (schema.description) {
    const help = el("span", "note question-help", schema.description);
    help.id = id;
    input.setAttribute("aria-describedby", id);
    if (schema.type === "boolean") label.append(input, caption, help);
    else label.append(caption, input, help);
  } else if (schema.type === "boolean") label.append(input, caption);
  else label.append(caption, input);
  return { node: label, read };
}

// The question's box: its message, the form, Accept / Decline / Cancel. ``answer(action, content)``: sends the
// answer, resolves to nothing or rejects with the refusal to show; ``final``: whether a refusal leaves nothing to
// answer (the box stays disabled). The box stays until input_decided replaces it.
export function questionBox(data, answer, final) {
  const box = el("form", "question");
  box.noValidate = true; // checked on Accept only: Decline and Cancel send nothing of the form
  box.dataset.inputId = data.inputId;
  box.setAttribute("aria-label", `Question from ${data.server || data.name}`);
  const until = data.expiresAt ? ` It is declined if no one answers by ${new Date(data.expiresAt).toLocaleString()}.` : "";
  const asker = data.server ? `${data.server} (tool ${data.name})` : data.name;
  box.appendChild(el("p", "question-lead", `${asker} asks:${until}`));
  box.appendChild(el("p", "question-message", data.message));
  const schema = data.requestedSchema || {};
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(schema.properties || {}).map(([name, property]) => [
    name,
    fieldOf(name, property || {}, required.has(name)),
  ]);
  for (const [, field] of fields) box.appendChild(field.node);
  const accept = button("accept", "Accept");
  const decline = button("decline", "Decline");
  const cancel = button("cancel plain", "Cancel");
  const failure = errorLine();
  const buttons = el("div", "approval-buttons");
  buttons.append(accept, decline, cancel);
  box.append(buttons, failure);
  const acceptable = !fields.some(([, field]) => field.unsupported);
  if (!acceptable) {
    accept.disabled = true;
    formFailure(failure, "This question asks for something the console cannot take: Decline or Cancel it.");
  }
  const controls = () => [...box.querySelectorAll("input, select, button")];
  const send = async (action) => {
    let content;
    if (action === "accept") {
      if (!box.reportValidity()) return;
      content = {};
      for (const [name, field] of fields) {
        const { present, value } = field.read();
        if (present) content[name] = value;
      }
    }
    for (const control of controls()) control.disabled = true;
    formFailure(failure, "");
    try {
      await answer(action, content);
    } catch (refusal) {
      formFailure(failure, refusal.message);
      if (!final(refusal)) for (const control of controls()) control.disabled = control === accept && !acceptable;
    }
  };
  box.addEventListener("submit", (event) => {
    event.preventDefault(); // Enter in a field: Accept
    send("accept");
  });
  accept.addEventListener("click", () => send("accept"));
  decline.addEventListener("click", () => send("decline"));
  cancel.addEventListener("click", () => send("cancel"));
  return box;
}

const DECISION_WORDS = { accept: "Answered", decline: "Declined", cancel: "Cancelled" };

// What input_decided puts in the question's place.
export function questionDecision(data) {
  let text = `${DECISION_WORDS[data.action] || data.action}`;
  text += data.decidedBy ? ` by ${data.decidedBy}.` : ": no one answered in time.";
  return el("p", `question-decision decided-${data.action}`, text);
}
