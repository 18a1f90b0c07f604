// The settings a run asks for besides its messages: the model (a listed one, or a name typed in), the persona and
// the system prompt a new conversation starts with, the reasoning effort, verbosity and max tokens. A stored
// conversation's settings (what its newest run asked for) set them again when it is shown.
import { json } from "./api.js";
import { el } from "./dom.js";
import { state as shared } from "./console-state.js";
import { useConversationTools } from "./tools-panel.js";
import { showError } from "./transcript.js";

const MODEL_STORE = "console.model"; // the model of a new conversation; a stored one keeps its own (its settings)
const OTHER_MODEL = "\u0000other"; // the picker's "Other…" entry: a name typed in (the list omits patterns)

const $ = (id) => document.getElementById(id);
const ui = {
  model: $("model"),
  modelOther: $("model-other"),
  persona: $("persona"),
  personaNote: $("persona-note"),
  effort: $("effort"),
  verbosity: $("verbosity"),
  maxTokens: $("max-tokens"),
  newChat: $("new-chat"),
  systemPrompt: $("system-prompt"),
};

const state = {
  personas: new Map(), // name -> {name, description, model, systemPrompt}
  tenantPrompt: null, // the tenant's system prompt: a conversation without a persona's starts with it
  promptEdited: false, // the system prompt was typed in: a persona picked later does not replace it
};

export async function loadModels() {
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
export function chosenModel() {
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

export async function loadPersonas() {
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

// A conversation with nothing stored: its system prompt may be set, and the suggestions are offered.
export function startFresh() {
  shared.fresh = true;
  state.promptEdited = false;
  ui.systemPrompt.value = defaultPrompt();
  ui.newChat.hidden = false;
}

// The controls from a stored conversation's settings (what its newest run asked for); none: they stay.
export function applySettings(settings) {
  if (!settings) return;
  ui.persona.value = settings.persona && state.personas.has(settings.persona) ? settings.persona : "";
  if (settings.model) setModel(settings.model);
  ui.effort.value = (settings.reasoning && settings.reasoning.effort) || "";
  ui.verbosity.value = settings.verbosity || "";
  ui.maxTokens.value = settings.maxTokens ? String(settings.maxTokens) : "";
  useConversationTools(settings.tools); // the switches of its tools
}

// What the run asks for besides its messages: the settings its conversation then keeps.
export function chosenSettings() {
  const settings = {};
  if (ui.persona.value) settings.persona = ui.persona.value;
  if (ui.effort.value) settings.reasoning = { effort: ui.effort.value, summary: "auto" };
  if (ui.verbosity.value) settings.verbosity = ui.verbosity.value;
  const maxTokens = Number(ui.maxTokens.value);
  if (ui.maxTokens.value.trim() && Number.isInteger(maxTokens) && maxTokens >= 1) settings.maxTokens = maxTokens;
  return settings;
}

// The new conversation's system prompt as typed; sent with its first message only.
export function systemPrompt() {
  return ui.systemPrompt.value.trim();
}

// Something of the conversation is stored: its system prompt is set, and the suggestions are no longer offered.
export function hideNewChat() {
  ui.newChat.hidden = true;
}

// A run asked for with no model: the name is to be typed in.
export function askForModelName() {
  ui.modelOther.focus();
}

export function initRunSettings() {
  ui.model.addEventListener("change", () => {
    rememberModel();
    if (!ui.modelOther.hidden) ui.modelOther.focus();
  });
  ui.modelOther.addEventListener("change", rememberModel);
  ui.persona.addEventListener("change", choosePersona);
  ui.systemPrompt.addEventListener("input", () => {
    state.promptEdited = true;
  });
}
