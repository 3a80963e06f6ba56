// Where the server's YAML errors go in the editor: the page renders each error with its
// line and column (`#yaml-marks`, from web/yamllines.py); these turn them into CodeMirror
// diagnostics. No CodeMirror here, so that node can test it.

/** The marks the page rendered (`[{path, message, line, column}]`), or [] without any. */
export function readMarks(script) {
  if (!script) return [];
  try {
    const marks = JSON.parse(script.textContent);
    return Array.isArray(marks) ? marks.filter((m) => m && Number.isInteger(m.line)) : [];
  } catch {
    return [];
  }
}

/** The range to underline on a line (`{from, text}`) for an error at `column` (1-based):
 * from there to the line's end; a column past the end marks the line from its first
 * non-blank character, an empty line is marked where it is. */
export function markRange(line, column) {
  const end = line.from + line.text.length;
  let from = line.from + Math.max(0, (Number(column) || 1) - 1);
  if (from >= end) from = line.from + (line.text.length - line.text.trimStart().length);
  return { from: Math.min(from, end), to: end };
}

/** A diagnostic per mark, on its line of `doc` (CodeMirror's `Text`: `lines`, `line(n)`);
 * a line past the end is the last one (the text changed since the server saw it). */
export function diagnosticsFor(doc, marks) {
  return marks.map((mark) => {
    const line = doc.line(Math.min(Math.max(1, mark.line), doc.lines));
    const where = mark.path && mark.path !== "spec" ? `${mark.path}: ` : "";
    return {
      ...markRange(line, mark.column),
      severity: "error",
      message: `${where}${mark.message}`,
    };
  });
}
