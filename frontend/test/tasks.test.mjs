import assert from "node:assert/strict";
import { test } from "node:test";

import { TaskTable } from "../src/pages/job/tasks.js";

// The job page's task table: a row the live feed adds before the fragment brings the
// real one has as many cells as the template's header (which has a Cause column now).

// Just enough of a table for a stand-in row: a header row and a body that makes rows.
function fakeTable(headers) {
  const rows = [];
  const cell = () => ({ textContent: "", className: "", replaceChildren() {} });
  const body = {
    rows,
    insertRow() {
      const row = {
        dataset: {},
        cells: [],
        insertCell() {
          const made = cell();
          this.cells.push(made);
          return made;
        },
        querySelector: () => null,
        remove() {},
      };
      rows.push(row);
      return row;
    },
  };
  return { tHead: { rows: [{ cells: headers }] }, tBodies: [body] };
}

test("a stand-in row has a cell for each column of the header", () => {
  const table = fakeTable(Array.from({ length: 11 }, (_, i) => `h${i}`));
  const panel = { addEventListener() {}, querySelector: () => table };
  new TaskTable(panel).addRow({ task: 7, role: "worker", index: 0, state: "assigned" });
  const [row] = table.tBodies[0].rows;
  assert.equal(row.cells.length, 11);
  assert.equal(row.cells[0].textContent, "worker-0");
  assert.equal(row.dataset.taskId, "7");
});
