// Loaded by every page: htmx (bundled from npm, never from a CDN), relative times, the
// navigation's menu button on narrow screens, and keyboard access to boxes that scroll.

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

/** On a narrow screen a wide table scrolls sideways inside itself (phone.css), as a long
 * code block does at any width. One with nothing focusable in it gets a tab stop, so the
 * keyboard can scroll it too (GitHub's code blocks do the same). Not only when it scrolls
 * right now: a window can be narrowed at any time, and the check would come a frame late. */
const SCROLLERS = "table.grid, pre";
const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";

function markScrollers(root) {
  const boxes = [...root.querySelectorAll(SCROLLERS)];
  if (root.matches?.(SCROLLERS)) boxes.push(root);
  for (const box of boxes) {
    if (!box.hasAttribute("tabindex") && !box.querySelector(FOCUSABLE)) box.tabIndex = 0;
  }
}

// Tables that htmx swaps in or page scripts draw: marked in the same task (a mutation
// observer's callback runs before anything else can look at the page).
new MutationObserver((records) => {
  for (const record of records) {
    for (const node of record.addedNodes) {
      if (node.nodeType === Node.ELEMENT_NODE) markScrollers(node);
    }
  }
}).observe(document.body, { childList: true, subtree: true });
markScrollers(document);
