// The submit page's search section: its fields show while its checkbox is ticked, and the
// submit button says what will be submitted. Without this script the fields stay in view
// and the checkbox alone decides (the server reads it).

/** Wire the checkbox `toggle` to the section's fields and the submit button. */
export function setupSearchSection(toggle) {
  const fields = document.getElementById("search-fields");
  const submit = document.getElementById("submit-button");
  const show = () => {
    if (fields) fields.hidden = !toggle.checked;
    if (submit) submit.textContent = toggle.checked ? "Submit experiment" : "Submit job";
  };
  toggle.addEventListener("change", show);
  show();
}
