// The task table: badges change in place as task messages arrive, and the table alone is
// fetched again (an htmx fragment, debounced by its `hx-trigger="refresh delay:…"`) to
// bring nodes, attempts and exit codes.

import { stateClass } from "../../lib/series.js";
import { taskSource } from "./logic.js";

export class TaskTable {
  constructor(panel) {
    this.panel = panel; // #tasks-panel, whose content htmx swaps
    this.latest = new Map(); // task id -> latest task message from the feed
    // The feed may be newer than the fragment fetched: apply what it said since.
    panel?.addEventListener("htmx:afterSwap", () => this.reapply());
  }

  get table() {
    return this.panel?.querySelector("#tasks") ?? null;
  }

  update(msg) {
    this.latest.set(msg.task, msg);
    const row = this.row(msg.task);
    if (row) this.setBadge(row, msg.state, msg.message);
    else this.addRow(msg);
    this.refresh();
  }

  /** Ask htmx for the table again (the trigger's delay merges a burst into one request). */
  refresh() {
    if (this.panel && window.htmx) window.htmx.trigger(this.panel, "refresh");
  }

  row(taskId) {
    return this.table?.querySelector(`tr[data-task-id="${taskId}"]`) ?? null;
  }

  /** The state's badge, and under it a preparing task's progress (its environment's build). */
  setBadge(row, state, message = "") {
    const cell = row.querySelector(".task-state");
    if (!cell) return;
    const badge = document.createElement("span");
    badge.className = stateClass(state);
    badge.textContent = state;
    const parts = [badge];
    if (state === "preparing" && message) {
      const note = document.createElement("div");
      note.className = "task-note muted";
      note.textContent = message;
      parts.push(note);
    }
    cell.replaceChildren(...parts);
  }

  // A stand-in row until the fragment brings the node and resources.
  addRow(msg) {
    const body = this.table?.tBodies[0];
    if (!body) return;
    for (const r of [...body.rows]) if (!r.dataset.taskId) r.remove(); // "Not placed yet."
    const row = body.insertRow();
    row.dataset.taskId = String(msg.task);
    // As many cells as the header has columns (the fragment's template decides them).
    const columns = this.table.tHead?.rows[0]?.cells.length ?? 1;
    for (let i = 0; i < columns; i += 1) row.insertCell().textContent = "—";
    row.cells[0].textContent = taskSource(msg) || `task ${msg.task}`;
    row.cells[2].className = "task-state";
    this.setBadge(row, msg.state, msg.message);
  }

  reapply() {
    for (const msg of this.latest.values()) {
      const row = this.row(msg.task);
      if (row) this.setBadge(row, msg.state, msg.message);
    }
  }
}
