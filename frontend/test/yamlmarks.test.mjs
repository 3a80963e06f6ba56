import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { diagnosticsFor, markRange, readMarks } from "../src/pages/submit/yamlmarks.js";

// A stand-in for CodeMirror's Text: lines numbered from 1, offsets from 0.
function textOf(string) {
  const lines = [];
  let from = 0;
  for (const text of string.split("\n")) {
    lines.push({ from, text });
    from += text.length + 1;
  }
  return { lines: lines.length, line: (n) => lines[n - 1] };
}

describe("readMarks", () => {
  test("the rendered marks, without malformed ones", () => {
    const script = {
      textContent: JSON.stringify([{ line: 4, column: 1, path: "foo", message: "m" }, { line: "x" }]),
    };
    assert.deepEqual(readMarks(script), [{ line: 4, column: 1, path: "foo", message: "m" }]);
  });

  test("no script or bad JSON: no marks", () => {
    assert.deepEqual(readMarks(null), []);
    assert.deepEqual(readMarks({ textContent: "{" }), []);
    assert.deepEqual(readMarks({ textContent: '{"line": 1}' }), []);
  });
});

describe("markRange", () => {
  test("from the column to the end of the line", () => {
    assert.deepEqual(markRange({ from: 10, text: "  max: 2" }, 3), { from: 12, to: 18 });
  });

  test("a column past the end marks the line from its first non-blank character", () => {
    assert.deepEqual(markRange({ from: 10, text: "  max: 2" }, 40), { from: 12, to: 18 });
  });

  test("an empty line is marked where it is", () => {
    assert.deepEqual(markRange({ from: 5, text: "" }, 1), { from: 5, to: 5 });
  });
});

describe("diagnosticsFor", () => {
  const doc = textOf("name: x\nfoo: 1\nworkers: {min: 3, max: 2}\n");

  test("one error diagnostic per mark, on its line, naming the field", () => {
    const found = diagnosticsFor(doc, [
      { line: 2, column: 1, path: "foo", message: "Unknown field 'foo'." },
      { line: 3, column: 19, path: "workers.max", message: "max (2) must be at least min (3)." },
    ]);
    assert.deepEqual(found, [
      { from: 8, to: 14, severity: "error", message: "foo: Unknown field 'foo'." },
      {
        from: 33,
        to: 40,
        severity: "error",
        message: "workers.max: max (2) must be at least min (3).",
      },
    ]);
  });

  test("an error about the whole text has no path; a line past the end is the last", () => {
    const [found] = diagnosticsFor(doc, [{ line: 9, column: 1, path: "spec", message: "Bad." }]);
    assert.deepEqual(found, { from: 41, to: 41, severity: "error", message: "Bad." });
  });
});
