// The jobs list: filters and page links swap only the table (htmx, see job_list.html);
// the table refreshes itself every few seconds while the page is visible, and says when
// it cannot; picked jobs stay picked across refreshes and pages, for "Compare".

import "./base.js";

import { showLiveStatus } from "../lib/socket.js";

const compareForm = document.getElementById("compare-form");
const compareButton = document.getElementById("compare-button");
const compareCount = document.getElementById("compare-count");
const liveStatus = document.getElementById("live-status");
const MIN = Number(compareForm.dataset.min);
const MAX = Number(compareForm.dataset.max);

// Job ids picked for comparison, in the order they were picked.
const picked = new Set();

function showPicked() {
  const n = picked.size;
  compareButton.disabled = n < MIN || n > MAX;
  if (n === 0) compareCount.textContent = `Pick ${MIN}–${MAX} jobs to compare`;
  else if (n > MAX) compareCount.textContent = `${n} picked: compare at most ${MAX}`;
  else compareCount.textContent = `${n} picked`;
}

function checkPicked(root) {
  for (const box of root.querySelectorAll("input.compare-pick")) box.checked = picked.has(box.value);
}

document.addEventListener("change", (event) => {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || !box.classList.contains("compare-pick")) return;
  if (box.checked) picked.add(box.value);
  else picked.delete(box.value);
  showPicked();
});

compareForm.addEventListener("submit", (event) => {
  event.preventDefault();
  if (picked.size < MIN || picked.size > MAX) return;
  location.assign(`${compareForm.action}?ids=${[...picked].join(",")}`);
});

// Filters: leave empty fields out of the URL (`?state=pending`, not `?team=&state=pending…`).
document.body.addEventListener("htmx:configRequest", (event) => {
  if (event.detail.elt.id !== "job-filters") return;
  for (const [name, value] of Object.entries(event.detail.parameters)) {
    if (value === "") delete event.detail.parameters[name];
  }
});

document.body.addEventListener("htmx:afterSwap", (event) => {
  if (event.detail.target.id !== "job-table") return;
  checkPicked(document);
  showLiveStatus(liveStatus, true);
});
for (const name of ["htmx:sendError", "htmx:responseError", "htmx:timeout"]) {
  document.body.addEventListener(name, () => showLiveStatus(liveStatus, false));
}

checkPicked(document);
for (const box of document.querySelectorAll("input.compare-pick:checked")) picked.add(box.value);
showPicked();
showLiveStatus(liveStatus, true);
