// The Runtime section: a tenant's runtime (max iterations, tool cache, stream mode, agent loop on or off) within the
// operator's caps, for admin keys only; any other 4xx hides it (see servers.js).
import { json, notForThisKey } from "./api.js";
import { formFailure } from "./dom.js";

const RUNTIME_PATH = "/api/v1/admin/runtime";

const $ = (id) => document.getElementById(id);
const ui = {
  runtimePanel: $("runtime-panel"),
  runtimeHeading: $("runtime-heading"),
  runtimeForm: $("runtime-form"),
  runtimeMaxIterations: $("runtime-max-iterations"),
  runtimeMaxIterationsNote: $("runtime-max-iterations-note"),
  runtimeToolCache: $("runtime-tool-cache"),
  runtimeToolCacheNote: $("runtime-tool-cache-note"),
  runtimeStreamMode: $("runtime-stream-mode"),
  runtimeStreamModeNote: $("runtime-stream-mode-note"),
  runtimeAgentEnabled: $("runtime-agent-enabled"),
  runtimeAgentNote: $("runtime-agent-note"),
  runtimeError: $("runtime-error"),
  runtimeSave: $("runtime-save"),
  runtimeDefaults: $("runtime-defaults"),
  runtimeNote: $("runtime-note"),
};

const shown = { runtime: null }; // the runtime in force, as last answered

async function loadRuntime() {
  try {
    showRuntime(await json(RUNTIME_PATH));
  } catch (failure) {
    ui.runtimePanel.hidden = notForThisKey(failure);
    ui.runtimeForm.hidden = true;
    ui.runtimeNote.hidden = false;
    ui.runtimeNote.textContent = `Runtime unavailable: ${failure.message}`;
  }
}

function showRuntime(runtime) {
  shown.runtime = runtime;
  const mine = new Set(runtime.setByAdmin || []);
  const origin = (field) => (mine.has(field) ? "set for your tenant" : "the operator's default");
  ui.runtimePanel.hidden = false;
  ui.runtimeForm.hidden = false;
  ui.runtimeHeading.textContent = `Runtime of ${runtime.tenant}`;
  ui.runtimeMaxIterations.value = String(runtime.maxIterations);
  ui.runtimeToolCache.value = String(runtime.toolCacheSeconds);
  ui.runtimeStreamMode.value = runtime.streamMode;
  ui.runtimeAgentEnabled.checked = runtime.agentEnabled;
  const caps = runtime.caps || {};
  ui.runtimeToolCache.disabled = !(caps.toolCacheSeconds > 0); // no cache to tune
  ui.runtimeMaxIterationsNote.textContent =
    `LLM calls per run; at most ${caps.maxIterations}. Now ${origin("maxIterations")}.`;
  ui.runtimeToolCacheNote.textContent =
    caps.toolCacheSeconds > 0
      ? `How long a tool result is reused; at most ${caps.toolCacheSeconds}, 0 turns it off. ` +
        `Now ${origin("toolCacheSeconds")}.`
      : "The operator keeps no tool results: the cache is off.";
  ui.runtimeStreamModeNote.textContent = `How the OpenAI front answers stream: true. Now ${origin("streamMode")}.`;
  ui.runtimeAgentNote.textContent =
    `Off: every request is a plain completion, no tools. Now ${origin("agentEnabled")}.`;
  ui.runtimeDefaults.disabled = mine.size === 0;
}

// The fields changed on the form (an emptied number: back to the operator's default).
function runtimeChanges() {
  const now = shown.runtime;
  const changes = {};
  const number = (input, field) => {
    if (!input.value.trim()) {
      if ((now.setByAdmin || []).includes(field)) changes[field] = null;
    } else if (Number(input.value) !== now[field]) changes[field] = Number(input.value);
  };
  number(ui.runtimeMaxIterations, "maxIterations");
  number(ui.runtimeToolCache, "toolCacheSeconds");
  if (ui.runtimeStreamMode.value !== now.streamMode) changes.streamMode = ui.runtimeStreamMode.value;
  if (ui.runtimeAgentEnabled.checked !== now.agentEnabled) changes.agentEnabled = ui.runtimeAgentEnabled.checked;
  return changes;
}

async function patchRuntime(changes) {
  formFailure(ui.runtimeError, "");
  ui.runtimeNote.hidden = false;
  if (!Object.keys(changes).length) {
    ui.runtimeNote.textContent = "Nothing to save: the form shows the runtime in force.";
    return;
  }
  ui.runtimeSave.disabled = true;
  try {
    showRuntime(await json(RUNTIME_PATH, { method: "PATCH", body: changes }));
    ui.runtimeNote.textContent = "Saved: your tenant's next runs use it.";
  } catch (failure) {
    ui.runtimeNote.hidden = true;
    const lead = failure.code === "runtime_not_stored" ? "This agent-service keeps no store for it" : "Not saved";
    formFailure(ui.runtimeError, `${lead}: ${failure.message}`);
  } finally {
    ui.runtimeSave.disabled = false;
  }
}

// Wires the form; answers the loader (called once at start).
export function initRuntime() {
  ui.runtimeForm.addEventListener("submit", (event) => {
    event.preventDefault();
    patchRuntime(runtimeChanges());
  });
  ui.runtimeDefaults.addEventListener("click", () => {
    patchRuntime(Object.fromEntries((shown.runtime.setByAdmin || []).map((field) => [field, null])));
  });
  return loadRuntime;
}
