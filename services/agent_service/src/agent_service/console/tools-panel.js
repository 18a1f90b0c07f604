// The Tools section: a switch for each tool a run may use, grouped by server, each group with a switch for all of
// it. What is switched off belongs to the conversation (its stored settings' tools), not to this tab; a new
// conversation starts with the switches of the one shown before.
import { json } from "./api.js";
import { el } from "./dom.js";

const ui = {
  tools: document.getElementById("tools"),
  toolsNote: document.getElementById("tools-note"),
};

const state = {
  tools: [], // [{name, description, server, title, unavailable}]
  disabledTools: new Set(), // the names switched off
};

export async function loadTools() {
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
export function chosenTools() {
  const names = state.tools.map((tool) => tool.name);
  if (!names.some((name) => state.disabledTools.has(name))) return undefined;
  return names.filter((name) => !state.disabledTools.has(name));
}

// The switches from a stored conversation's settings: ``tools``, the names its runs may use (none: all of them).
export function useConversationTools(tools) {
  const allowed = tools ? new Set(tools) : null;
  state.disabledTools = new Set(state.tools.map((tool) => tool.name).filter((name) => allowed && !allowed.has(name)));
  if (state.tools.length) renderTools(); // none listed (the gateway is away): its note stays
}
