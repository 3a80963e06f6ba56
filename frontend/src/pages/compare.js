// The compare page: one chart per metric name, one line per job (legend: "name #id").
// Metrics come downsampled from each job's metrics API, sized to the chart.

import uPlot from "uplot";

import { Charts } from "../lib/charts.js";
import { getJSON } from "../lib/http.js";
import { compactNumber, normalizePoints, parseMetricsResponse } from "../lib/series.js";
import "./base.js";

async function start(root) {
  const jobs = [...root.querySelectorAll("#compare-jobs tr[data-job-id]")].map((row) => ({
    key: row.dataset.jobId,
    label: row.dataset.label,
    url: row.dataset.metricsUrl,
  }));
  const charts = makeCharts(document.getElementById("charts"), document.getElementById("charts-empty"));
  await Promise.all(
    jobs.map((job) =>
      loadMetrics(charts, job.url, { key: job.key, label: job.label }).catch((err) =>
        console.warn(`metrics of ${job.label}:`, err),
      ),
    ),
  );
}

// ---- SHIM until lib/metrics.js and the keyed `Charts.setSeries` land (helper CHARTS) ----
// Then delete from here to the end marker, and import instead:
//   import { loadMetrics } from "../lib/metrics.js";
// and use `new Charts(root, emptyNote)` in place of `makeCharts`.

const SHIM_MAX_POINTS = 1000;
const SHIM_HEIGHT = 240;
const SHIM_COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

/** The real Charts once it draws several keyed lines per chart; a minimal stand-in before. */
function makeCharts(root, emptyNote) {
  if (typeof Charts.prototype.setSeries === "function") return new Charts(root, emptyNote);
  return new OverlayCharts(root, emptyNote);
}

/** As lib/metrics.js's: fetch the job's series, downsampled to the chart's width. */
async function loadMetrics(charts, metricsUrl, { key, label }) {
  const sep = metricsUrl.includes("?") ? "&" : "?";
  const body = await getJSON(`${metricsUrl}${sep}max_points=${charts.maxPoints()}`);
  for (const [name, points] of parseMetricsResponse(body)) charts.setSeries(name, points, { key, label });
}

/** One uPlot chart per metric name with one line per key (a job). */
class OverlayCharts {
  constructor(root, emptyNote) {
    this.root = root;
    this.emptyNote = emptyNote;
    this.charts = new Map(); // name -> {el, plot, lines: Map(key -> {label, points})}
  }

  maxPoints() {
    return SHIM_MAX_POINTS;
  }

  setSeries(name, points, { key, label }) {
    let chart = this.charts.get(name);
    if (!chart) {
      chart = { el: document.createElement("div"), plot: null, lines: new Map() };
      chart.el.className = "chart";
      chart.el.dataset.metric = name;
      const next = [...this.charts.keys()].sort().find((other) => other > name);
      this.root.insertBefore(chart.el, next === undefined ? null : this.charts.get(next).el);
      this.charts.set(name, chart);
      if (this.emptyNote) this.emptyNote.hidden = true;
    }
    chart.lines.set(String(key), { label, points: normalizePoints(points) });
    this.draw(name, chart);
  }

  draw(name, chart) {
    const keys = [...chart.lines.keys()].sort((a, b) => Number(a) - Number(b));
    const tables = keys.map((k) => {
      const { points } = chart.lines.get(k);
      return [points.map((p) => p.step), points.map((p) => p.value)];
    });
    const data = uPlot.join(tables);
    chart.plot?.destroy();
    chart.plot = new uPlot(
      {
        title: name,
        width: Math.max(200, Math.floor(chart.el.clientWidth)),
        height: SHIM_HEIGHT,
        scales: { x: { time: false } },
        axes: [{ label: "step" }, { values: (_u, ticks) => ticks.map(compactNumber) }],
        series: [
          { label: "step" },
          ...keys.map((k, i) => ({
            label: chart.lines.get(k).label,
            stroke: SHIM_COLORS[i % SHIM_COLORS.length],
            width: 2,
            spanGaps: true,
          })),
        ],
      },
      data,
      chart.el,
    );
    chart.el.dataset.points = String(data[0].length);
    chart.el.dataset.lines = String(keys.length);
  }
}
// ---- end of SHIM ----

const root = document.getElementById("compare");
if (root) start(root);
