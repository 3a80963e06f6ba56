// Live fragments by polling, for pages that have no live feed of their own (the
// dashboard, the node pages): every few seconds, while the page is visible, htmx asks the
// page's own URL for the fragment and swaps it in; a status element says "live" or
// "disconnected — reconnecting…", and polling goes on by itself after a failure.

import htmx from "htmx.org";

import { showLiveStatus } from "./socket.js";

/**
 * Refresh the element matching `selector` (it carries `hx-get` and `hx-trigger="poll"`)
 * every `everyMs` while the page is visible, and at once when it becomes visible again.
 * @param {string} selector
 * @param {Element | null} statusEl
 */
export function pollFragment(selector, statusEl, { everyMs = 4000 } = {}) {
  let inFlight = false;
  const refresh = () => {
    const el = document.querySelector(selector);
    if (el === null || document.hidden || inFlight) return;
    htmx.trigger(el, "poll");
  };
  // The element that sent the request: after an outerHTML swap htmx reports the end of
  // the request on a parent (the element itself is gone), so ask the request's config.
  const mine = (event) => {
    const elt = event.detail?.requestConfig?.elt ?? event.detail?.elt;
    return Boolean(elt?.matches?.(selector));
  };

  document.body.addEventListener("htmx:beforeRequest", (event) => {
    if (mine(event)) inFlight = true;
  });
  document.body.addEventListener("htmx:afterRequest", (event) => {
    if (!mine(event)) return;
    inFlight = false;
    showLiveStatus(statusEl, event.detail.successful === true);
  });
  // A session that ended answers with the sign-in page: load it, never swap it in.
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    if (mine(event) && /\/login\//.test(event.detail.xhr?.responseURL ?? "")) {
      event.detail.shouldSwap = false;
      location.reload();
    }
  });
  document.addEventListener("visibilitychange", refresh);
  setInterval(refresh, everyMs);
  showLiveStatus(statusEl, true);
}
