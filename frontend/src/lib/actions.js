// Forms that act on something: confirmation dialogs, copy buttons, and htmx posts that the
// server refuses (the form comes back with its errors, to be shown in place).

/** `<button data-opens="ID">` opens `<dialog id="ID">` as a modal (Escape closes it);
 * a `[data-closes]` button closes the dialog it sits in. */
export function enableDialogs(root = document) {
  root.addEventListener("click", (event) => {
    const opener = event.target.closest("[data-opens]");
    if (opener) {
      document.getElementById(opener.dataset.opens)?.showModal();
      return;
    }
    event.target.closest("[data-closes]")?.closest("dialog")?.close();
  });
}

/** Copy `text`: the Clipboard API where allowed, else select `source` and use the older
 * copy command; false (with the text left selected) when neither works. */
export async function copyText(text, source) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    try {
      return document.execCommand("copy");
    } catch {
      return false;
    }
  }
}

/** `<button data-copy="ID">` copies the text of the element `ID`, and says so in the
 * nearest section's `.copy-status` (a polite live region). */
export function enableCopyButtons(root = document) {
  root.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-copy]");
    if (!button) return;
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    const copied = await copyText(source.textContent.trim(), source);
    const status = button.closest("section")?.querySelector(".copy-status");
    const message = copied ? "Copied." : "Selected: press Ctrl+C to copy.";
    if (status) status.textContent = message;
    button.dataset.copied = copied ? "true" : "false";
  });
}

// Refusals whose body is the form again, with the errors beside the fields they name.
const REFUSALS = new Set([400, 409, 422]);

/** Let htmx swap in refused posts (by default it drops 4xx answers), then move the focus
 * to the first field in error or the notice the swapped part marks with `data-focus`.
 * htmx settles a moment after the swap: a person who already moved the focus in between
 * (clicked or tabbed into a field) keeps it, so their typing never lands in another field. */
export function swapRefusals() {
  let focusAtSwap = null;
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    if (REFUSALS.has(event.detail.xhr.status)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
  document.body.addEventListener("htmx:afterSwap", () => {
    focusAtSwap = document.activeElement;
  });
  document.body.addEventListener("htmx:afterSettle", (event) => {
    const part = event.target;
    if (!(part instanceof Element) || !part.isConnected) return;
    if (document.activeElement !== focusAtSwap) return;
    const target = part.querySelector('[aria-invalid="true"], [data-focus]');
    target?.focus();
  });
}
