// uPlot line charts, one per metric name, created when the metric first appears.

import uPlot from "uplot";

import { compactNumber, emptySeries, mergeSeries } from "./series.js";

const CHART_HEIGHT = 240;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d"];

/** One uPlot line chart per metric name, created when the metric first appears. */
export class Charts {
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
