// The live job page: metric charts, task and job state, and logs, kept current over the
// job's WebSocket feed. Data handling lives in lib/series.js; this file is the DOM side.

import { Charts } from "../lib/charts.js";
import { getJSON } from "../lib/http.js";
import { loadMetrics } from "../lib/metrics.js";
import {
  LOG_LINE_CAP,
  dropOverlap,
  formatEvent,
  formatLogLine,
  groupByName,
  logLineClass,
  parseLogsResponse,
  stateClass,
  stateReason,
} from "../lib/series.js";
import { LiveSocket, showLiveStatus } from "../lib/socket.js";
import "./base.js";

// Several task messages in a row (a job being placed) cause one reload of the table.
const TASKS_RELOAD_DELAY_MS = 300;
// The logs API returns pages of at most this many lines after a given id.
const LOG_PAGES_MAX = 20;

/** The #logs box: capped, and following the end unless the user scrolled up. */
class LogView {
  constructor(el) {
    this.el = el;
  }

  append(lines) {
    if (!this.el || lines.length === 0) return;
    const atBottom = this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < 8;
    const fragment = document.createDocumentFragment();
    for (const l of lines.slice(-LOG_LINE_CAP)) {
      const span = document.createElement("span");
      span.className = logLineClass(l);
      span.textContent = `${formatLogLine(l)}\n`;
      fragment.append(span);
    }
    this.el.append(fragment);
    let excess = this.el.childElementCount - LOG_LINE_CAP;
    while (excess > 0 && this.el.firstElementChild) {
      this.el.firstElementChild.remove();
      excess -= 1;
    }
    if (atBottom) this.el.scrollTop = this.el.scrollHeight;
  }
}

/** The #tasks table: badges updated in place, rows reloaded from the page when new tasks appear. */
class TaskTable {
  constructor(table) {
    this.table = table;
    this.latest = new Map(); // task id -> latest task message from the feed
    this.reloadTimer = null;
  }

  update(msg) {
    this.latest.set(msg.task, msg);
    const row = this.row(msg.task);
    if (row) {
      this.setBadge(row, msg.state);
      return;
    }
    this.addRow(msg);
    this.scheduleReload();
  }

  row(taskId) {
    return this.table?.querySelector(`tr[data-task-id="${taskId}"]`) ?? null;
  }

  setBadge(row, state) {
    const cell = row.querySelector(".task-state");
    if (!cell) return;
    const badge = document.createElement("span");
    badge.className = stateClass(state);
    badge.textContent = state;
    cell.replaceChildren(badge);
  }

  // A stand-in row until the reload brings the node and resources.
  addRow(msg) {
    const body = this.table?.tBodies[0];
    if (!body) return;
    for (const r of [...body.rows]) if (!r.dataset.taskId) r.remove(); // "Not placed yet."
    const row = body.insertRow();
    row.dataset.taskId = String(msg.task);
    const name = msg.index === null ? msg.role : `${msg.role}-${msg.index}`;
    for (const text of [name || `task ${msg.task}`, "—", "", "—", "—", "—"]) {
      row.insertCell().textContent = text;
    }
    row.cells[2].className = "task-state";
    this.setBadge(row, msg.state);
  }

  scheduleReload() {
    clearTimeout(this.reloadTimer);
    this.reloadTimer = setTimeout(() => this.reload().catch(console.warn), TASKS_RELOAD_DELAY_MS);
  }

  async reload() {
    const response = await fetch(location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = page.querySelector("#tasks tbody");
    const body = this.table?.tBodies[0];
    if (!fresh || !body) return;
    body.replaceWith(document.importNode(fresh, true));
    // The feed may be newer than the page we fetched.
    for (const msg of this.latest.values()) {
      const row = this.row(msg.task);
      if (row) this.setBadge(row, msg.state);
      else this.addRow(msg);
    }
  }
}

class JobPage {
  constructor(root) {
    this.root = root;
    this.metricsUrl = root.dataset.metricsUrl;
    this.logsUrl = root.dataset.logsUrl;
    this.wsPath = root.dataset.wsPath;
    this.charts = new Charts(document.getElementById("charts"), document.getElementById("charts-empty"));
    this.logs = new LogView(document.getElementById("logs"));
    this.tasks = new TaskTable(document.getElementById("tasks"));
    this.stateEl = document.getElementById("job-state");
    this.reasonEl = document.getElementById("job-reason");
    this.liveEl = document.getElementById("live-status");
    this.logBuffer = []; // live lines received before the history is shown
    this.historyShown = false;
  }

  start() {
    this.connect();
    this.loadMetrics();
    this.loadLogHistory();
  }

  async loadMetrics() {
    try {
      await loadMetrics(this.charts, this.metricsUrl);
    } catch (err) {
      console.warn("metrics:", err);
    }
  }

  // The API pages forward from the oldest line; keep reading to reach the newest.
  async loadLogHistory() {
    let history = [];
    try {
      let after = 0;
      for (let page = 0; page < LOG_PAGES_MAX; page += 1) {
        const sep = this.logsUrl.includes("?") ? "&" : "?";
        const lines = parseLogsResponse(await getJSON(`${this.logsUrl}${sep}after=${after}`));
        if (lines.length === 0) break;
        history = history.concat(lines).slice(-LOG_LINE_CAP);
        const last = lines[lines.length - 1].id;
        if (!Number.isInteger(last) || last <= after) break;
        after = last;
      }
    } catch (err) {
      console.warn("logs:", err);
    }
    this.logs.append(history.concat(dropOverlap(history, this.logBuffer)));
    this.logBuffer = [];
    this.historyShown = true;
  }

  connect() {
    new LiveSocket(this.wsPath, {
      onMessage: (msg) => this.handle(msg),
      onStatus: (live) => showLiveStatus(this.liveEl, live),
      // Points reported while we were away came neither over the feed nor in the first fetch.
      onReconnect: () => this.loadMetrics(),
    }).connect();
  }

  handle(msg) {
    switch (msg.type) {
      case "metrics":
        for (const [name, points] of groupByName(msg.points)) this.charts.merge(name, points);
        break;
      case "state":
        if (this.stateEl) {
          this.stateEl.className = stateClass(msg.state);
          this.stateEl.textContent = msg.state;
        }
        if (this.reasonEl) this.reasonEl.textContent = stateReason(msg);
        break;
      case "task":
        this.tasks.update(msg);
        break;
      case "logs":
        if (this.historyShown) this.logs.append(msg.lines);
        else this.logBuffer.push(...msg.lines);
        break;
      case "event":
        this.appendEvent(msg);
        break;
    }
  }

  appendEvent(msg) {
    const list = document.getElementById("events");
    if (!list) return;
    const { time, text, actor } = formatEvent(msg);
    const item = document.createElement("li");
    const timeEl = document.createElement("time");
    timeEl.textContent = time;
    const who = document.createElement("small");
    who.textContent = actor;
    item.append(timeEl, text, who);
    list.append(item);
  }
}

const root = document.getElementById("job");
if (root) new JobPage(root).start();
