// The job's actions: the cancel confirmation <dialog>, and what changes when the job ends.
// The forms post with htmx and get the actions partial back (#job-actions, swapped whole).

/** Open and close dialogs named by `data-open-dialog` / `data-close-dialog` buttons
 * (delegated, so buttons swapped in by htmx work too). Escape closes natively. */
export function setupDialogs(root = document) {
  root.addEventListener("click", (event) => {
    const opener = event.target.closest("[data-open-dialog]");
    if (opener) {
      document.getElementById(opener.dataset.openDialog)?.showModal();
      return;
    }
    const closer = event.target.closest("[data-close-dialog]");
    if (closer) closer.closest("dialog")?.close();
  });
  // After a post, focus the outcome (the dialog it came from is gone), so keyboard and
  // screen-reader users land on what happened.
  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail?.target?.id !== "job-actions") return;
    const actions = document.getElementById("job-actions");
    const target = document.getElementById("workers-target");
    if (actions && target) target.textContent = actions.dataset.workersTarget ?? target.textContent;
    const outcome = actions?.querySelector(".notice, .form-errors, .field-error, [aria-invalid='true']");
    if (outcome) {
      if (!outcome.matches("input")) outcome.tabIndex = -1;
      outcome.focus();
    }
  });
}

/** The job ended while the page was open: nothing is left to cancel or scale. */
export function jobEnded() {
  const actions = document.getElementById("job-actions");
  if (!actions) return;
  for (const dialog of actions.querySelectorAll("dialog[open]")) dialog.close();
  for (const el of actions.querySelectorAll(".scale-form, [data-open-dialog], dialog")) el.remove();
}
