// The submit page: two tabs over one spec (a form and the YAML the CLI takes). Switching
// tabs asks the server to turn one into the other (`/jobs/new/convert/`), so both always
// show the same spec; the server validates either on submit. Tabs follow the WAI-ARIA tabs
// pattern: arrow keys, Home and End move between them. A code archive chosen in the form
// is uploaded at once (submit/code.js). The YAML tab's editor (submit/yamleditor.js,
// CodeMirror) is loaded when that tab is first shown; the textarea under it stays the field.
// Below both tabs, the search section turns the job into an experiment (submit/search.js).

import "./base.js";
import { setupCodeUpload } from "./submit/code.js";
import { setupSearchSection } from "./submit/search.js";

const form = document.getElementById("job-form");

if (form) {
  const tabs = [...form.querySelectorAll('[role="tab"]')];
  const activeTab = document.getElementById("active-tab");
  const status = document.getElementById("tab-status");
  const yaml = form.elements.namedItem("spec");

  const nameOf = (tab) => tab.id.replace("tab-", "");

  let editor = null; // a promise of the YAML editor, once asked for
  function showEditor() {
    // A chunk that fails to load leaves the textarea, which works on its own.
    editor ??= import("./submit/yamleditor.js")
      .then((m) => m.attachYamlEditor(yaml))
      .catch(() => null);
    return editor;
  }
  function setYaml(text) {
    yaml.value = text;
    editor?.then((e) => e?.setText(text));
  }

  function show(name) {
    for (const tab of tabs) {
      const selected = nameOf(tab) === name;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      document.getElementById(tab.getAttribute("aria-controls")).hidden = !selected;
    }
    activeTab.value = name;
  }

  async function convert(to) {
    const body = new FormData(form);
    body.delete("code_file"); // the archive goes to its own upload, not here
    body.set("to", to);
    const response = await fetch(form.dataset.convertUrl, {
      method: "POST",
      body,
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    return response.json();
  }

  function fill(fields) {
    for (const [path, value] of Object.entries(fields)) {
      const input = form.elements.namedItem(path);
      if (input) input.value = value;
    }
  }

  async function select(tab, { focus = false } = {}) {
    const name = nameOf(tab);
    if (focus) tab.focus();
    if (name === activeTab.value) return;
    status.textContent = "";
    let answer;
    try {
      answer = await convert(name);
    } catch {
      status.textContent = "Could not reach the server to switch editors; try again.";
      return;
    }
    if (answer.error) {
      const where = answer.error.path ? `${answer.error.path}: ` : "";
      status.textContent = `Fix this first: ${where}${answer.error.message}`;
      return;
    }
    if (name === "yaml") setYaml(answer.yaml);
    else fill(answer.fields);
    show(name);
    if (name === "yaml") showEditor();
  }

  if (yaml && activeTab.value === "yaml") showEditor();

  const archive = form.elements.namedItem("code_file");
  if (archive) setupCodeUpload(form, archive);

  const search = form.elements.namedItem("experiment");
  if (search) setupSearchSection(search);

  for (const tab of tabs) {
    tab.addEventListener("click", (event) => {
      event.preventDefault();
      select(tab);
    });
    tab.addEventListener("keydown", (event) => {
      const i = tabs.indexOf(tab);
      const next = {
        ArrowRight: tabs[(i + 1) % tabs.length],
        ArrowLeft: tabs[(i - 1 + tabs.length) % tabs.length],
        Home: tabs[0],
        End: tabs[tabs.length - 1],
      }[event.key];
      if (next) {
        event.preventDefault();
        select(next, { focus: true });
      } else if (event.key === " ") {
        event.preventDefault();
        select(tab);
      }
    });
  }
}
