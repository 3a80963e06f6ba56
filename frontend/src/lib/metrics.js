// Fetching a job's metrics for its charts, downsampled on the server to the charts' width.

import { getJSON } from "./http.js";
import { parseMetricsResponse } from "./series.js";

/** `url` with `max_points` set (same-origin URLs stay relative). */
export function withMaxPoints(url, maxPoints, base = globalThis.location?.href ?? "http://localhost/") {
  const full = new URL(url, base);
  full.searchParams.set("max_points", String(maxPoints));
  return full.origin === new URL(base).origin ? `${full.pathname}${full.search}` : full.href;
}

/**
 * Fetch `metricsUrl` with `max_points=charts.maxPoints()` and draw each series: one line
 * per metric under `key` (default "main"), labelled `label` (default the metric's name).
 * Returns the series fetched, a Map of name to points; throws when the request fails.
 */
export async function loadMetrics(charts, metricsUrl, { key, label } = {}) {
  const series = parseMetricsResponse(await getJSON(withMaxPoints(metricsUrl, charts.maxPoints())));
  for (const [name, points] of series) charts.setSeries(name, points, { key, label });
  return series;
}
