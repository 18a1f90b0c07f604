// Small DOM helpers shared by the console's modules. Text always goes in as text (textContent): nothing from the
// model, the tools, the servers or the store is ever parsed as HTML.

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// Shows ``text`` in a form's error line; empty: hides it.
export function formFailure(box, text) {
  box.textContent = text;
  box.hidden = !text;
}

// A button of type "button" (never a form's submit), with an accessible name when its text is not enough.
export function button(className, text, label) {
  const node = el("button", className, text);
  node.type = "button";
  if (label) node.setAttribute("aria-label", label);
  return node;
}

// An error line of a card or a form (role alert: read out when it appears), hidden until told something.
export function errorLine() {
  const line = el("p", "form-error");
  line.setAttribute("role", "alert");
  line.hidden = true;
  return line;
}
