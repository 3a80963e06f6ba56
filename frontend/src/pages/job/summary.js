// The job's fields on the page, kept as the feed says: the state badge and its reason,
// Started, Finished, Restarts, the workers wanted, and the Result card.

import { refreshRelativeTimes } from "../../lib/format.js";
import { stateClass, stateReason } from "../../lib/series.js";
import { preemptionsText, shownTime, stateChanged } from "./fields.js";
import { JOB_TERMINAL } from "./logic.js";

const byId = (id) => document.getElementById(id);

export class JobSummary {
  /** @param {HTMLElement} root  #job, whose `data-preparing-note` is said while preparing */
  constructor(root) {
    this.preparingNote = root.dataset.preparingNote ?? "";
    this.stateEl = byId("job-state");
    this.reasonEl = byId("job-reason");
    this.resultBox = byId("job-result-box");
    this.shown = { state: this.stateEl?.textContent.trim() ?? "", pendingReason: "" };
    this.hasResult = Boolean(byId("job-result"));
  }

  /** Show a `state` message; true if the state or its reason changed. */
  show(msg) {
    const changed = stateChanged(this.shown, msg);
    this.shown = { state: msg.state, pendingReason: msg.pendingReason ?? "" };
    if (this.stateEl) {
      this.stateEl.className = stateClass(msg.state);
      this.stateEl.textContent = msg.state;
    }
    if (msg.state !== "running") byId("job-stalled")?.remove(); // a stall ends with its run
    if (this.reasonEl) {
      const preparing = msg.state === "preparing" ? this.preparingNote : "";
      this.reasonEl.textContent = stateReason(msg) || preparing || "";
    }
    if (msg.startedAt !== undefined) this.showTime(byId("job-started"), msg.startedAt);
    if (msg.finishedAt !== undefined) this.showTime(byId("job-finished"), msg.finishedAt);
    this.showCount(byId("job-restarts"), msg.restarts);
    this.showCount(byId("job-infra-restarts"), msg.infraRestarts);
    this.showCount(byId("workers-target"), msg.workers);
    const preempted = byId("job-preemptions");
    if (preempted && msg.preemptions !== undefined) preempted.textContent = preemptionsText(msg.preemptions);
    if (JOB_TERMINAL.has(msg.state) && !this.hasResult) {
      this.showNote("The entrypoint returned no result.");
    }
    return changed;
  }

  /** A `<time>` as the server renders one, or a dash while there is none. */
  showTime(cell, iso) {
    if (!cell) return;
    if (!iso) {
      cell.textContent = "—";
      return;
    }
    if (cell.querySelector("time")?.getAttribute("datetime") === iso) return;
    const time = document.createElement("time");
    time.dataset.relative = "";
    time.setAttribute("datetime", iso);
    time.textContent = shownTime(iso);
    cell.replaceChildren(time);
    refreshRelativeTimes(cell);
  }

  showCount(el, value) {
    if (el && value !== undefined) el.textContent = String(value);
  }

  /** What the entrypoint returned (the coordinator prints it just before the job ends). */
  showResult(rows) {
    if (!this.resultBox || rows.length === 0) return;
    this.hasResult = true;
    const intro = document.createElement("p");
    intro.className = "muted";
    intro.textContent = "What the entrypoint returned (the coordinator's result):";
    const table = document.createElement("table");
    table.className = "grid compact";
    table.id = "job-result";
    const body = table.createTBody();
    for (const [name, value] of rows) {
      const row = body.insertRow();
      const head = document.createElement("th");
      head.scope = "row";
      head.textContent = name;
      const code = document.createElement("code");
      code.textContent = value;
      row.append(head);
      row.insertCell().append(code);
    }
    this.resultBox.replaceChildren(intro, table);
  }

  showNote(text) {
    const note = this.resultBox?.querySelector("p.muted:only-child");
    if (note && note.textContent !== text) note.textContent = text;
  }
}
