// The side panel (conversations, tools, settings): beside the transcript on a wide screen, folded on a phone,
// where its toggle opens it over the page.
const toggle = document.getElementById("toggle-side");

export function closeSideOnPhone() {
  document.body.classList.remove("side-open");
  toggle.setAttribute("aria-expanded", "false");
}

export function initSidePanel() {
  toggle.addEventListener("click", () => {
    const open = document.body.classList.toggle("side-open");
    toggle.setAttribute("aria-expanded", String(open));
  });
}
