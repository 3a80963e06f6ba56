// The live job page: tabs over the overview (charts, last values, tasks), logs, events,
// checkpoints and configuration, kept current over the job's WebSocket feed. Data logic
// lives in lib/series.js and job/logic.js; the parts of the page in job/*.js.

import { Charts } from "../lib/charts.js";
import { refreshRelativeTimes } from "../lib/format.js";
import { loadMetrics } from "../lib/metrics.js";
import { groupByName } from "../lib/series.js";
import { LiveSocket, showLiveStatus } from "../lib/socket.js";
import "./base.js";
import { jobEnded, setupDialogs } from "./job/actions.js";
import { parseJobMessage } from "./job/fields.js";
import { JOB_TERMINAL, LastValues, formatValue, isCheckpointLine, taskSource } from "./job/logic.js";
import { LogFeed, LogPanel, LogView } from "./job/logs.js";
import { JobSummary } from "./job/summary.js";
import { setupTabs } from "./job/tabs.js";
import { TaskTable } from "./job/tasks.js";

// Checkpoint lines are few: the newest of them are enough.
const CHECKPOINT_TAIL = 100;

/** Charts that also tell `onPoints` what they were given (for the last-values table),
 * whichever way the points come: a history fetch (`setSeries` or `merge`) or the feed. */
class JobCharts extends Charts {
  constructor(root, emptyNote, onPoints) {
    super(root, emptyNote);
    this.onPoints = onPoints;
  }

  merge(name, points, ...rest) {
    const out = super.merge(name, points, ...rest);
    this.onPoints(name, points);
    return out;
  }

  setSeries(name, points, ...rest) {
    const out = super.setSeries?.(name, points, ...rest);
    this.onPoints(name, points);
    return out;
  }
}

/** The "Last reported values" table, redrawn at most once a frame. */
class LastValuesTable {
  constructor(table) {
    this.body = table?.tBodies[0] ?? null;
    this.values = new LastValues();
    this.pending = false;
  }

  update(name, points) {
    if (!this.values.update(name, points) || !this.body || this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.body.replaceChildren(
        ...this.values.rows().map(([metric, { step, value }]) => {
          const row = document.createElement("tr");
          row.dataset.lastMetric = metric;
          for (const text of [metric, String(step), formatValue(value)]) {
            row.insertCell().textContent = text;
          }
          return row;
        }),
      );
    });
  }
}

class JobPage {
  constructor(root) {
    this.root = root;
    this.metricsUrl = root.dataset.metricsUrl;
    this.logsUrl = root.dataset.logsUrl;
    this.wsPath = root.dataset.wsPath;
    this.lastValues = new LastValuesTable(document.getElementById("last-values"));
    this.charts = new JobCharts(
      document.getElementById("charts"),
      document.getElementById("charts-empty"),
      (name, points) => this.lastValues.update(name, points),
    );
    this.logs = new LogPanel(this.logsUrl);
    this.checkpoints = new LogFeed(new LogView(document.getElementById("checkpoint-lines")), this.logsUrl, {
      filter: { q: "checkpoint" },
      only: isCheckpointLine,
      tail: CHECKPOINT_TAIL,
    });
    this.checkpointsLoaded = false;
    this.tasks = new TaskTable(document.getElementById("tasks-panel"));
    this.summary = new JobSummary(root);
    this.liveEl = document.getElementById("live-status");
  }

  start() {
    setupDialogs();
    // The feed first, so that nothing reported while the history loads is lost.
    this.connect();
    setupTabs(document.querySelector('#job [role="tablist"]'), (name) => this.tabShown(name));
    this.loadMetrics();
    this.logs.reload();
  }

  tabShown(name) {
    if (name === "logs") this.logs.shown();
    if (name === "checkpoints" && !this.checkpointsLoaded) {
      this.checkpointsLoaded = true;
      this.checkpoints.load();
    }
  }

  async loadMetrics() {
    try {
      await loadMetrics(this.charts, this.metricsUrl);
    } catch (err) {
      console.warn("metrics:", err);
    }
  }

  connect() {
    // The server sends the job's fields at every (re)connect, then each change.
    new LiveSocket(this.wsPath, {
      parse: parseJobMessage,
      onMessage: (msg) => this.handle(msg),
      onStatus: (live) => showLiveStatus(this.liveEl, live),
      // What happened while we were away came neither over the feed nor in the first fetch.
      onReconnect: () => {
        this.loadMetrics();
        this.logs.reload();
        if (this.checkpointsLoaded) this.checkpoints.load();
        this.tasks.refresh();
        this.refreshQueue();
      },
    }).connect();
  }

  handle(msg) {
    switch (msg.type) {
      case "metrics":
        for (const [name, points] of groupByName(msg.points)) this.charts.merge(name, points);
        break;
      case "state":
        this.showState(msg);
        break;
      case "task":
        this.tasks.update(msg);
        this.logs.addSource(taskSource(msg));
        break;
      case "logs":
        this.logs.live(msg.lines);
        if (this.checkpointsLoaded) this.checkpoints.live(msg.lines);
        break;
      case "event":
        this.appendEvent(msg);
        break;
      case "result":
        this.summary.showResult(msg.rows);
        break;
    }
  }

  showState(msg) {
    if (this.summary.show(msg)) this.refreshQueue();
    if (JOB_TERMINAL.has(msg.state)) jobEnded();
  }

  refreshQueue() {
    const box = document.getElementById("job-queue");
    if (box && window.htmx) window.htmx.trigger(box, "refresh");
  }

  appendEvent(msg) {
    const list = document.getElementById("events");
    if (!list) return;
    const item = document.createElement("li");
    const time = document.createElement("time");
    time.dataset.relative = "";
    time.setAttribute("datetime", msg.time);
    time.textContent = msg.time.replace("T", " ").slice(0, 19);
    const what = msg.toState ? `${msg.kind} → ${msg.toState}` : msg.kind;
    const who = document.createElement("small");
    who.textContent = msg.actor ? `(${msg.actor})` : "";
    item.append(time, ` ${what} — ${msg.reason} `, who);
    list.append(item);
    refreshRelativeTimes(item);
  }
}

const root = document.getElementById("job");
if (root) new JobPage(root).start();
