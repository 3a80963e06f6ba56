// The compare page: one chart per metric name, one line per job (legend: "name #id").
// Metrics come downsampled from each job's metrics API, sized to the chart; a job still
// queued or running adds its points live from its feed, and the final-values table and
// the state column follow it.

import { Charts } from "../lib/charts.js";
import { getJSON } from "../lib/http.js";
import { loadMetrics } from "../lib/metrics.js";
import { groupByName } from "../lib/series.js";
import { LiveSocket, showLiveStatus } from "../lib/socket.js";
import { EPOCH_METRIC, clockAnchors, emptyAnchors, epochAnchors, extendClock } from "../lib/xaxis.js";
import "./base.js";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const FINALS_EVERY_MS = 5000; // the finals table is fetched again at most this often

class ComparePage {
  constructor(root) {
    this.root = root;
    this.jobs = [...root.querySelectorAll("#compare-jobs tr[data-job-id]")].map((row) => ({
      key: row.dataset.jobId,
      label: row.dataset.label,
      url: row.dataset.metricsUrl,
      row,
    }));
    this.charts = new Charts(document.getElementById("charts"), document.getElementById("charts-empty"));
    this.charts.orderKeys(this.jobs.map((job) => job.key)); // a run's colour follows its row
    this.charts.anchorsOf = (key, x) => this.anchorsOf(key, x);
    this.clocks = null; // key -> {anchors, origin}, fetched when "time" is first chosen
    this.pendingClock = null; // while they load: key -> live {step, time} entries meanwhile
    this.chosenX = "step"; // the x axis last chosen (the clocks may still be loading)
    this.open = 0; // live feeds connected
    this.finalsDue = null;
  }

  async start() {
    this.setupControls();
    await Promise.all(
      this.jobs.map((job) =>
        loadMetrics(this.charts, job.url, { key: job.key, label: job.label }).catch((err) =>
          console.warn(`metrics of ${job.label}:`, err),
        ),
      ),
    );
    this.showXNote();
    for (const job of this.jobs) if (!TERMINAL.has(job.row.dataset.state)) this.follow(job);
  }

  anchorsOf(key, x) {
    if (x === "epoch") {
      const line = this.charts.lineOf(EPOCH_METRIC, key);
      const anchors = epochAnchors(line);
      return anchors.steps.length ? anchors : null;
    }
    const clock = this.clocks?.get(key);
    return clock && clock.anchors.steps.length ? clock.anchors : null;
  }

  /** Log scale, smoothing and the x axis for every chart (hidden without this script). */
  setupControls() {
    const controls = document.getElementById("chart-controls");
    if (!controls) return;
    const log = document.getElementById("log-scale");
    const smoothing = document.getElementById("smoothing");
    const shown = document.getElementById("smoothing-value");
    log.addEventListener("change", () => this.charts.setView({ log: log.checked }));
    smoothing.addEventListener("input", () => {
      const weight = Number(smoothing.value);
      shown.textContent = weight === 0 ? "off" : weight.toFixed(2);
      this.charts.setView({ smoothing: weight });
    });
    for (const radio of controls.querySelectorAll('input[name="x-axis"]')) {
      radio.addEventListener("change", () => {
        if (radio.checked) this.setX(radio.value);
      });
    }
    controls.hidden = false;
  }

  async setX(x) {
    this.chosenX = x;
    if (x === "time" && this.clocks === null) {
      if (this.pendingClock !== null) return; // the clocks are on their way: drawn then
      this.note("Loading when each run reached its steps…");
      this.pendingClock = new Map();
      this.clocks = new Map(await Promise.all(this.jobs.map((job) => this.loadClock(job))));
      for (const [key, entries] of this.pendingClock) this.addClock(key, entries);
      this.pendingClock = null;
      if (this.chosenX !== x) return; // another axis was chosen meanwhile, and drawn
    }
    this.charts.setView({ x });
    this.showXNote();
  }

  async loadClock(job) {
    try {
      const body = await getJSON(`${job.url}clock/`);
      const origin = body.clock.length ? Math.min(...body.clock.map((e) => Date.parse(e.time))) : null;
      return [job.key, { anchors: clockAnchors(body.clock, origin), origin, purged: Boolean(body.purged_at) }];
    } catch (err) {
      console.warn(`clock of ${job.label}:`, err);
      return [job.key, { anchors: emptyAnchors(), origin: null, failed: true }];
    }
  }

  addClock(key, entries) {
    const clock = this.clocks.get(key);
    if (!clock) return;
    if (clock.origin === null) clock.origin = Math.min(...entries.map((e) => Date.parse(e.time)));
    clock.anchors = extendClock(clock.anchors, entries, clock.origin);
  }

  /** Under the controls: which runs the chosen x axis leaves out, and why. */
  showXNote() {
    const x = this.charts.view.x;
    if (x === "step") return this.note("");
    const missing = this.jobs.filter((job) => this.anchorsOf(job.key, x) === null);
    if (missing.length === 0) return this.note("");
    const names = missing.map((job) => job.label).join(", ");
    if (x === "epoch") {
      return this.note(
        `Not drawn by epoch: ${names} reported no “${EPOCH_METRIC}” metric ` +
          "(report it with the step, e.g. ps_runtime.report(step=step, epoch=epoch)).",
      );
    }
    const why = missing.some((job) => this.clocks?.get(job.key)?.purged)
      ? "its points' times were deleted by retention, or it reported no points"
      : "it reported no points yet";
    return this.note(`Not drawn over time: ${names} (${why}).`);
  }

  note(text) {
    const el = document.getElementById("x-axis-note");
    if (!el) return;
    el.textContent = text;
    el.hidden = text === "";
  }

  /** Follow a queued or running job: its points, its state, then its final values. */
  follow(job) {
    const status = document.getElementById("compare-live");
    const socket = new LiveSocket(`/ws/jobs/${job.key}/`, {
      onMessage: (msg) => this.handle(job, msg, socket),
      onStatus: (live) => {
        this.open += live ? 1 : -1;
        if (status) status.hidden = false;
        showLiveStatus(status, this.open > 0);
      },
      onReconnect: () =>
        loadMetrics(this.charts, job.url, { key: job.key, label: job.label }).catch(() => {}),
    });
    socket.connect();
  }

  handle(job, msg, socket) {
    if (msg.type === "metrics") {
      for (const [name, points] of groupByName(msg.points)) {
        this.charts.merge(name, points, { key: job.key, label: job.label });
      }
      const timed = msg.points.filter((p) => Number.isFinite(p.step) && typeof p.time === "string");
      if (this.pendingClock) this.pendingClock.set(job.key, [...(this.pendingClock.get(job.key) ?? []), ...timed]);
      else if (this.clocks && timed.length) this.addClock(job.key, timed);
      // New anchors move this run's points on every chart, not only on the ones merged.
      const x = this.charts.view.x;
      const moved = x === "time" ? timed.length > 0 : x === "epoch" && msg.points.some((p) => p.name === EPOCH_METRIC);
      if (moved) {
        this.charts.redrawAll();
        this.showXNote();
      }
      this.refreshFinalsSoon();
    } else if (msg.type === "state") {
      this.showState(job, msg.state);
      if (TERMINAL.has(msg.state)) {
        socket.close();
        this.open = Math.max(0, this.open - 1);
        showLiveStatus(document.getElementById("compare-live"), this.open > 0);
        this.refreshFinalsSoon(0);
      }
    }
  }

  showState(job, state) {
    job.row.dataset.state = state;
    const badge = job.row.querySelector(".state");
    if (!badge) return;
    badge.textContent = state;
    badge.className = `state state-${state}`;
  }

  /** Fetch the page again and take its final-values section (at most every 5 s). */
  refreshFinalsSoon(delay = FINALS_EVERY_MS) {
    if (this.finalsDue !== null) {
      if (delay > 0) return;
      clearTimeout(this.finalsDue);
    }
    this.finalsDue = setTimeout(async () => {
      this.finalsDue = null;
      try {
        const response = await fetch(location.href, { headers: { Accept: "text/html" } });
        if (!response.ok) return;
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = page.getElementById("compare-finals-body");
        const held = document.getElementById("compare-finals-body");
        if (fresh && held) held.replaceWith(fresh);
      } catch (err) {
        console.warn("final values:", err);
      }
    }, delay);
  }
}

const root = document.getElementById("compare");
if (root) new ComparePage(root).start();
