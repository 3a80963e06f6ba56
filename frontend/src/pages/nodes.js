// The node pages: the list (or a node's body) refreshes every few seconds, so a node that
// joins shows up without a reload; the install command has a copy button; draining a
// node asks for confirmation first.

import "./base.js";

import { copyText } from "../lib/actions.js";
import { pollFragment } from "../lib/poll.js";

const status = document.getElementById("live-status");
if (document.getElementById("node-table")) pollFragment("#node-table", status);
if (document.getElementById("node-body")) pollFragment("#node-body", status);

for (const button of document.querySelectorAll("button[data-copy]")) {
  const source = document.getElementById(button.dataset.copy);
  const feedback = document.getElementById(button.getAttribute("aria-describedby"));
  let reset;
  button.addEventListener("click", async () => {
    const copied = await copyText(source.textContent.trim(), source);
    button.textContent = copied ? "Copied" : "Copy";
    if (feedback) {
      feedback.textContent = copied
        ? "Copied the command to the clipboard."
        : "Could not copy: the command is selected, press Ctrl+C.";
    }
    clearTimeout(reset);
    reset = setTimeout(() => {
      button.textContent = "Copy";
    }, 2500);
  });
}

// A form with data-confirm="<dialog id>" asks in that dialog before it is sent; without
// JavaScript it is sent at once.
for (const form of document.querySelectorAll("form[data-confirm]")) {
  const dialog = document.getElementById(form.dataset.confirm);
  if (!dialog) continue;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    dialog.showModal();
  });
  dialog.querySelector("[data-dialog-cancel]")?.addEventListener("click", () => dialog.close());
  dialog.querySelector("[data-dialog-confirm]")?.addEventListener("click", () => {
    dialog.close();
    form.submit();
  });
}
