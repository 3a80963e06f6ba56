// The live job page: metric charts, task and job state, and logs, kept current over the
// job's WebSocket feed. The data handling lives in series.js; this file is the DOM side.

import uPlot from "uplot";

import {
  LOG_LINE_CAP,
  dropOverlap,
  emptySeries,
  compactNumber,
  formatEvent,
  formatLogLine,
  groupByName,
  logLineClass,
  mergeSeries,
  nextBackoff,
  parseLogsResponse,
  parseMessage,
  parseMetricsResponse,
  stateClass,
  stateReason,
  wsUrl,
} from "./series.js";

const CHART_HEIGHT = 240;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d"];
// Several task messages in a row (a job being placed) cause one reload of the table.
const TASKS_RELOAD_DELAY_MS = 300;
// The logs API returns pages of at most this many lines after a given id.
const LOG_PAGES_MAX = 20;

async function getJSON(url) {
  const response = await fetch(url, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

/** One uPlot line chart per metric name, created when the metric first appears. */
class Charts {
  constructor(root, emptyNote) {
    this.root = root;
    this.emptyNote = emptyNote;
    this.charts = new Map(); // name -> {el, plot, series}
    this.resizer = new ResizeObserver((entries) => {
      for (const entry of entries) {
        const chart = [...this.charts.values()].find((c) => c.el === entry.target);
        if (chart) chart.plot.setSize({ width: this.widthOf(chart.el), height: CHART_HEIGHT });
      }
    });
  }

  widthOf(el) {
    return Math.max(200, Math.floor(el.clientWidth));
  }

  /** Merge points into the chart of `name`, creating it if needed, and redraw. */
  merge(name, points) {
    const chart = this.charts.get(name) ?? this.create(name);
    const merged = mergeSeries(chart.series, points);
    if (merged === chart.series) return;
    chart.series = merged;
    chart.plot.setData([merged.steps, merged.values]);
    chart.el.dataset.points = String(merged.steps.length);
  }

  create(name) {
    const el = document.createElement("div");
    el.className = "chart";
    el.dataset.metric = name;
    el.dataset.points = "0";
    // Keep charts in name order so the layout does not depend on arrival order.
    const next = [...this.charts.keys()].sort().find((other) => other > name);
    this.root.insertBefore(el, next === undefined ? null : this.charts.get(next).el);
    if (this.emptyNote) this.emptyNote.hidden = true;

    const color = COLORS[this.charts.size % COLORS.length];
    const plot = new uPlot(
      {
        title: name,
        width: this.widthOf(el),
        height: CHART_HEIGHT,
        scales: { x: { time: false } },
        axes: [{ label: "step" }, { values: (_u, ticks) => ticks.map(compactNumber) }],
        series: [{ label: "step" }, { label: name, stroke: color, width: 2 }],
        legend: { live: true },
      },
      [[], []],
      el,
    );
    const chart = { el, plot, series: emptySeries() };
    this.charts.set(name, chart);
    this.resizer.observe(el);
    return chart;
  }
}

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
    this.backoff = 0;
    this.connectedOnce = false;
    this.logBuffer = []; // live lines received before the history is shown
    this.historyShown = false;
  }

  start() {
    this.connect();
    this.loadMetrics();
    this.loadLogHistory();
  }

  setLive(text, live) {
    if (!this.liveEl) return;
    this.liveEl.textContent = text;
    this.liveEl.classList.toggle("live", live);
  }

  async loadMetrics() {
    try {
      for (const [name, points] of parseMetricsResponse(await getJSON(this.metricsUrl))) {
        this.charts.merge(name, points);
      }
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
    const socket = new WebSocket(wsUrl(location, this.wsPath));
    socket.addEventListener("open", () => {
      this.backoff = 0;
      this.setLive("live", true);
      // Points reported while we were away came neither over the feed nor in the first fetch.
      if (this.connectedOnce) this.loadMetrics();
      this.connectedOnce = true;
    });
    socket.addEventListener("message", (event) => this.handle(parseMessage(event.data)));
    socket.addEventListener("close", () => {
      this.backoff = nextBackoff(this.backoff);
      this.setLive("reconnecting…", false);
      setTimeout(() => this.connect(), this.backoff);
    });
  }

  handle(msg) {
    if (msg === null) return;
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
