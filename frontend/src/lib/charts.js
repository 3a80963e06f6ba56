// uPlot line charts, one per metric name, created when the metric first appears.
//
// A chart holds one or more lines, each under a key: "main" on the job page, a job id on
// the compare page. A line is drawn as its value (the last point of each bucket) over a
// band from the bucket's min to its max, so a downsampled million-point series still
// shows its spikes.

import uPlot from "uplot";

import {
  alignLines,
  compactNumber,
  emptyLine,
  firstTrackWidth,
  keepNewer,
  lineFromPoints,
  maxPointsFor,
  mergeLine,
  smoothLine,
  allPositive,
} from "./series.js";
import { colorOfName, colorOfRun } from "./colors.js";
import { axisLabel, formatX, placeLine } from "./xaxis.js";

const CHART_HEIGHT = 240;
const BAND_ALPHA = "40"; // appended to a #rrggbb colour

/** A CSS variable of the page's theme, or `fallback`. */
function themeColor(el, name, fallback) {
  const value = getComputedStyle(el).getPropertyValue(name).trim();
  return value || fallback;
}

/** One uPlot chart per metric name; several keyed lines per chart. */
export class Charts {
  /** `xName`: what the x axis counts when it is not steps (the experiment page's budget,
   * "epochs"); the view's x stays "step", which draws the points where they are. */
  constructor(root, emptyNote, { xName = null } = {}) {
    this.root = root;
    this.emptyNote = emptyNote;
    this.xName = xName;
    this.charts = new Map(); // name -> {el, plot, lines: Map(key -> {label, line, color})}
    this.keyColors = new Map(); // key -> colour, the same on every chart (compare page)
    this.view = { log: false, smoothing: 0, x: "step" }; // how every chart draws (setView)
    // With `view.x` other than "step": (key, x) -> a line's anchors (xaxis.js), or null
    // where that line cannot be placed (it is left out).
    this.anchorsOf = () => null;
    this.resizer = new ResizeObserver((entries) => {
      for (const entry of entries) {
        const chart = [...this.charts.values()].find((c) => c.el === entry.target);
        if (chart?.plot) chart.plot.setSize({ width: this.widthOf(chart.el), height: CHART_HEIGHT });
      }
    });
    // Axis and grid colours come from the theme: redraw when light/dark changes.
    window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", () => {
      for (const chart of this.charts.values()) this.rebuild(chart);
    });
  }

  widthOf(el) {
    return Math.max(200, Math.floor(el.clientWidth));
  }

  /** How many points per series to ask the server for: about one per pixel of a chart. */
  maxPoints() {
    const first = this.charts.values().next().value;
    if (first) return maxPointsFor(first.el.clientWidth);
    // No chart yet: the width of a column of the charts' grid, else of the whole box.
    const track = firstTrackWidth(getComputedStyle(this.root).gridTemplateColumns);
    return maxPointsFor(track ?? this.root.clientWidth);
  }

  /**
   * Replace the points of one line (metrics API points: buckets with min/max, or raw).
   *
   * Live points the line already holds past the new data's last step are kept: they
   * arrived after the server answered.
   */
  setSeries(name, points, { key = "main", label = name } = {}) {
    const chart = this.charts.get(name) ?? this.create(name);
    const fresh = lineFromPoints(points);
    const held = chart.lines.get(key);
    this.put(chart, key, label, held ? keepNewer(fresh, held.line) : fresh);
  }

  /** Append live `{step, value}` points to one line, creating the chart if needed. */
  merge(name, points, { key = "main", label } = {}) {
    const chart = this.charts.get(name) ?? this.create(name);
    const held = chart.lines.get(key);
    const line = held ? held.line : emptyLine();
    const merged = mergeLine(line, points);
    if (merged === line) return;
    this.put(chart, key, held ? held.label : (label ?? (key === "main" ? name : String(key))), merged);
  }

  /** The points of one line as held (`{steps, values, mins, maxs}`), or null. */
  lineOf(name, key = "main") {
    return this.charts.get(name)?.lines.get(key)?.line ?? null;
  }

  /** Redraw every chart's data (its lines' x may have moved: new anchors). */
  redrawAll() {
    for (const chart of this.charts.values()) if (chart.plot) this.redraw(chart);
  }

  put(chart, key, label, line) {
    const held = chart.lines.get(key);
    const color = held?.color ?? this.colorFor(key, chart);
    chart.lines.set(key, { label, line, color });
    if (!held) this.sortLines(chart);
    if (!chart.plot || !held || held.label !== label) this.rebuild(chart);
    else this.redraw(chart);
  }

  /** A chart's lines (and so its legend) in the order of `orderKeys`, not of arrival. */
  sortLines(chart) {
    const order = [...this.keyColors.keys()];
    const rank = (key) => (order.includes(key) ? order.indexOf(key) : order.length);
    chart.lines = new Map([...chart.lines].sort((a, b) => rank(a[0]) - rank(b[0])));
  }

  /** Keyed lines (runs) take the colours of `keys`' order, whatever order they load in. */
  orderKeys(keys) {
    keys.forEach((key, i) => this.keyColors.set(key, colorOfRun(i)));
  }

  colorFor(key, chart) {
    // The job page's single line takes its metric's colour (the same on every page);
    // keyed lines keep one colour per key across charts.
    if (key === "main") return colorOfName(chart.name);
    if (!this.keyColors.has(key)) this.keyColors.set(key, colorOfRun(this.keyColors.size));
    return this.keyColors.get(key);
  }

  /** Draw every chart with a log y axis (where all its values are above zero), smoothed
   * lines (`smoothing` 0..0.99) and/or over another x (`x`: "step", "epoch" or "time",
   * placed by `anchorsOf`). */
  setView(view) {
    this.view = { ...this.view, ...view };
    for (const chart of this.charts.values()) this.rebuild(chart);
  }

  data(chart) {
    const lines = [...chart.lines].map(([key, l]) => {
      const line = smoothLine(l.line, this.view.smoothing);
      if (this.view.x === "step") return line;
      const anchors = this.anchorsOf(key, this.view.x);
      return (anchors && placeLine(line, anchors)) ?? emptyLine();
    });
    return alignLines(lines);
  }

  logAxis(chart) {
    return this.view.log && allPositive([...chart.lines.values()].map((l) => l.line));
  }

  redraw(chart) {
    const data = this.data(chart);
    chart.plot.setData(data);
    chart.el.dataset.points = String(data[0].length);
    chart.el.dataset.drawn = String(drawnLines(data));
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
    const chart = { name, el, plot: null, lines: new Map() };
    this.charts.set(name, chart);
    this.resizer.observe(el);
    return chart;
  }

  /** (Re)create the chart's plot: needed when lines are added or the theme changes. */
  rebuild(chart) {
    chart.plot?.destroy();
    const muted = themeColor(this.root, "--muted", "#5b6270");
    const grid = themeColor(this.root, "--border-soft", "#eef0f3");
    const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const x = this.view.x;
    const xName = x === "step" && this.xName ? this.xName : x;
    const series = [{ label: xName, value: (_u, v) => formatX(x, v, compactNumber) || "—" }];
    const bands = [];
    const hidden = [];
    for (const { label, color } of chart.lines.values()) {
      const at = series.length;
      series.push(
        {
          label,
          stroke: color,
          width: 2,
          spanGaps: true,
          // The legend shows the bucket's range next to its last value.
          value: (u, v, _s, i) => {
            if (v === null || v === undefined || i === null) return "—";
            const low = u.data[at + 1][i];
            const high = u.data[at + 2][i];
            const text = compactNumber(v);
            return low === high || low === null ? text : `${text} (${compactNumber(low)}–${compactNumber(high)})`;
          },
        },
        { label: `${label} min`, stroke: "transparent", width: 0, spanGaps: true, points: { show: false } },
        { label: `${label} max`, stroke: "transparent", width: 0, spanGaps: true, points: { show: false } },
      );
      bands.push({ series: [at + 2, at + 1], fill: `${color}${BAND_ALPHA}` });
      hidden.push(at + 1, at + 2);
    }
    const data = this.data(chart);
    const log = this.logAxis(chart);
    // "log", "linear", or "linear-only": log asked for, but a value is not above zero.
    chart.el.dataset.scale = log ? "log" : this.view.log ? "linear-only" : "linear";
    chart.el.dataset.x = x;
    chart.plot = new uPlot(
      {
        title: chart.name,
        width: this.widthOf(chart.el),
        height: CHART_HEIGHT,
        // uPlot zooms on a drag across the chart and zooms out on a double-click.
        scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
        axes: [
          { ...axis, label: axisLabel(xName), values: (_u, ticks) => ticks.map((t) => formatX(x, t, compactNumber)) },
          { ...axis, values: (_u, ticks) => ticks.map(compactNumber) },
        ],
        series,
        bands,
        legend: { live: true },
      },
      data,
      chart.el,
    );
    // The band edges are drawn, not listed: the line's legend entry shows the range.
    const rows = chart.plot.root.querySelectorAll(".u-legend .u-series");
    for (const i of hidden) if (rows[i]) rows[i].style.display = "none";
    chart.el.dataset.points = String(data[0].length);
    chart.el.dataset.drawn = String(drawnLines(data));
  }
}

/** How many of a chart's lines (aligned data: x, then value/min/max per line) have a point. */
function drawnLines(data) {
  let drawn = 0;
  for (let i = 1; i < data.length; i += 3) if (data[i].some((v) => v !== null && v !== undefined)) drawn += 1;
  return drawn;
}
