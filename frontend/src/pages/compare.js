// The compare page: one chart per metric name, one line per job (legend: "name #id").
// Metrics come downsampled from each job's metrics API, sized to the chart.

import { Charts } from "../lib/charts.js";
import { loadMetrics } from "../lib/metrics.js";
import "./base.js";

async function start(root) {
  const jobs = [...root.querySelectorAll("#compare-jobs tr[data-job-id]")].map((row) => ({
    key: row.dataset.jobId,
    label: row.dataset.label,
    url: row.dataset.metricsUrl,
  }));
  const charts = new Charts(document.getElementById("charts"), document.getElementById("charts-empty"));
  charts.orderKeys(jobs.map((job) => job.key)); // a run's colour follows its row, not load order
  setupControls(charts);
  await Promise.all(
    jobs.map((job) =>
      loadMetrics(charts, job.url, { key: job.key, label: job.label }).catch((err) =>
        console.warn(`metrics of ${job.label}:`, err),
      ),
    ),
  );
}

/** Log scale and smoothing for every chart (progressive: hidden without this script). */
function setupControls(charts) {
  const controls = document.getElementById("chart-controls");
  if (!controls) return;
  const log = document.getElementById("log-scale");
  const smoothing = document.getElementById("smoothing");
  const shown = document.getElementById("smoothing-value");
  log.addEventListener("change", () => charts.setView({ log: log.checked }));
  smoothing.addEventListener("input", () => {
    const weight = Number(smoothing.value);
    shown.textContent = weight === 0 ? "off" : weight.toFixed(2);
    charts.setView({ smoothing: weight });
  });
  controls.hidden = false;
}

const root = document.getElementById("compare");
if (root) start(root);
