// The YAML tab's editor: CodeMirror 6 over the spec textarea, loaded only when the YAML
// tab is shown (a chunk of its own). The textarea stays the form's field (without this
// script it is the editor) and is written on every change, so the submit, Check and tab
// conversion read what the editor holds. Line numbers, no soft wrap, YAML highlighting
// in the site's colours (styles/editor.css), the server's errors marked on their lines.
// Tab is left to the browser (no indentWithTab), so the editor never traps the keyboard.

import { basicSetup, EditorView } from "codemirror";
import { yaml } from "@codemirror/lang-yaml";
import { syntaxHighlighting } from "@codemirror/language";
import { lintGutter, setDiagnostics } from "@codemirror/lint";
import { classHighlighter } from "@lezer/highlight";

import { diagnosticsFor, markRange, readMarks } from "./yamlmarks.js";

/** Replace `textarea` (the spec field) by the editor; answers `{setText, goTo, view}`. */
export function attachYamlEditor(textarea) {
  const label = textarea.labels?.[0];
  if (label && !label.id) label.id = `${textarea.id}_label`;
  const described = [textarea.getAttribute("aria-describedby"), `${textarea.id}_keys`]
    .filter(Boolean)
    .join(" ");
  const content = {
    tabindex: "0", // tabbable as it is; said so for checkers (axe: scrollable-region-focusable)
    "aria-describedby": described,
    ...(label ? { "aria-labelledby": label.id } : { "aria-label": "Job spec (YAML)" }),
    ...(textarea.getAttribute("aria-invalid") ? { "aria-invalid": "true" } : {}),
  };
  let changed = false;
  const view = new EditorView({
    doc: textarea.value,
    extensions: [
      basicSetup,
      yaml(),
      syntaxHighlighting(classHighlighter),
      lintGutter(),
      EditorView.contentAttributes.of(content),
      EditorView.editorAttributes.of({ class: "yaml-code" }),
      EditorView.updateListener.of((update) => {
        if (!update.docChanged) return;
        textarea.value = update.state.doc.toString();
        changed = true;
      }),
      EditorView.domEventHandlers({
        // What a textarea does: `change` when it loses focus changed (Check listens).
        blur() {
          if (!changed) return;
          changed = false;
          textarea.dispatchEvent(new Event("change", { bubbles: true }));
        },
      }),
    ],
  });
  textarea.after(view.dom);
  textarea.hidden = true;
  if (label) {
    // The label now names the editor (aria-labelledby); the hidden textarea needs none.
    label.removeAttribute("for");
    label.addEventListener("click", () => view.focus());
  }
  const marks = readMarks(document.getElementById("yaml-marks"));
  if (marks.length) view.dispatch(setDiagnostics(view.state, diagnosticsFor(view.state.doc, marks)));

  function goTo(lineNumber, column) {
    const doc = view.state.doc;
    const line = doc.line(Math.min(Math.max(1, lineNumber), doc.lines));
    const { from } = markRange(line, column);
    view.dispatch({ selection: { anchor: from }, scrollIntoView: true });
    view.focus();
  }

  for (const link of document.querySelectorAll(".yaml-line[data-line]")) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      goTo(Number(link.dataset.line), Number(link.dataset.column));
    });
  }

  function setText(text) {
    if (text === view.state.doc.toString()) return;
    view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    changed = false; // written by the page, not typed
  }

  return { setText, goTo, view };
}
