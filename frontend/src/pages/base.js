// Loaded by every page: htmx (bundled from npm, never from a CDN), relative times, and on
// narrow screens the navigation's menu button and keyboard access to tables that scroll.

import htmx from "htmx.org";

import { refreshRelativeTimes } from "../lib/format.js";

window.htmx = htmx;
// Fragments swapped in by htmx carry their own times; refresh those too.
document.addEventListener("htmx:afterSettle", () => refreshRelativeTimes(document));
refreshRelativeTimes(document);
setInterval(() => refreshRelativeTimes(document), 15000);

/** The menu button folds the main navigation on narrow screens (styles/phone.css hides the
 * links while aria-expanded is "false"). It starts hidden in the markup, so a page without
 * this script keeps its links in view. */
function collapsibleNav(button) {
  const nav = document.getElementById(button.getAttribute("aria-controls"));
  if (!nav) return;
  const setOpen = (open) => button.setAttribute("aria-expanded", String(open));
  button.hidden = false;
  button.addEventListener("click", () => setOpen(button.getAttribute("aria-expanded") !== "true"));
  // Escape closes the open menu from the button or from a link in it, and gives the focus
  // back to the button (the disclosure pattern of the ARIA practices).
  for (const element of [button, nav]) {
    element.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || button.getAttribute("aria-expanded") !== "true") return;
      setOpen(false);
      button.focus();
    });
  }
}

const navButton = document.querySelector(".nav-toggle");
if (navButton) collapsibleNav(navButton);

/** On a narrow screen a wide table scrolls inside itself (phone.css), as a long code block
 * does; one that scrolls gets a tab stop, so it can be scrolled with the keyboard even when
 * it holds no link. Checked again whenever the page changes (htmx swaps, live updates) or
 * the window is resized. */
function markScrollers() {
  for (const box of document.querySelectorAll("table.grid, pre")) {
    const scrolls =
      box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== "visible";
    if (scrolls && !box.hasAttribute("tabindex")) {
      box.tabIndex = 0;
      box.dataset.scrollStop = "";
    } else if (!scrolls && "scrollStop" in box.dataset) {
      box.removeAttribute("tabindex");
      delete box.dataset.scrollStop;
    }
  }
}

let scrollersPending = false;
function scheduleScrollerCheck() {
  if (scrollersPending) return;
  scrollersPending = true;
  requestAnimationFrame(() => {
    scrollersPending = false;
    markScrollers();
  });
}
new MutationObserver(scheduleScrollerCheck).observe(document.body, { childList: true, subtree: true });
window.addEventListener("resize", scheduleScrollerCheck);
markScrollers();
