// Loaded by every page: htmx (bundled from npm, never from a CDN) and relative times.

import htmx from "htmx.org";

import { refreshRelativeTimes } from "../lib/format.js";

window.htmx = htmx;
// Fragments swapped in by htmx carry their own times; refresh those too.
document.addEventListener("htmx:afterSettle", () => refreshRelativeTimes(document));
refreshRelativeTimes(document);
setInterval(() => refreshRelativeTimes(document), 15000);
