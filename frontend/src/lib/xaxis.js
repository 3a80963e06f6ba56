// What a chart's x axis counts: steps (as reported), epochs or time since a run began.
//
// A run's epochs and times are known at some of its steps only: the steps at which it
// reported its `epoch` metric, and the steps of its metrics API clock (`metrics/clock/`)
// and of the live feed's points. Those are its anchors, `{steps, xs}` ascending; every
// other step is placed between the two anchors around it (linearly), or beyond the first
// or last along the nearest two. Free of the DOM so node's test runner covers it.

export const X_AXES = ["step", "epoch", "time"];

/** The metric whose values are a run's epochs. */
export const EPOCH_METRIC = "epoch";

/** No anchors. */
export function emptyAnchors() {
  return { steps: [], xs: [] };
}

/**
 * Epoch anchors from a run's `epoch` line (`{steps, values}`): for each run of equal
 * consecutive values, its last step, where that epoch ended (a run reporting
 * `epoch=ceil(step / steps_per_epoch)` at every step says epoch 2 until step 2S). Epoch 0
 * is taken to be at step 0 when the first anchor is past both.
 */
export function epochAnchors(line) {
  const out = emptyAnchors();
  if (!line) return out;
  const { steps, values } = line;
  for (let i = 0; i < steps.length; i += 1) {
    const v = values[i];
    if (typeof v !== "number" || !Number.isFinite(v)) continue;
    const last = out.xs.length - 1;
    if (last >= 0 && out.xs[last] === v) out.steps[last] = steps[i];
    else if (last < 0 || v > out.xs[last]) {
      out.steps.push(steps[i]);
      out.xs.push(v);
    }
  }
  if (out.steps.length > 0 && out.steps[0] > 0 && out.xs[0] > 0) {
    out.steps.unshift(0);
    out.xs.unshift(0);
  }
  return out;
}

/**
 * Time anchors from clock entries `{step, time}` (ISO times), in seconds since `origin`
 * (a Date.parse number; default: the earliest time given). Steps and times are kept
 * ascending together: an entry that would go back in step or in time is dropped.
 */
export function clockAnchors(entries, origin = null) {
  const parsed = [];
  for (const e of Array.isArray(entries) ? entries : []) {
    const at = e && typeof e.time === "string" ? Date.parse(e.time) : NaN;
    if (e && Number.isFinite(e.step) && Number.isFinite(at)) parsed.push([e.step, at]);
  }
  parsed.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const zero = origin ?? Math.min(...parsed.map((p) => p[1]));
  const out = emptyAnchors();
  for (const [step, at] of parsed) {
    const seconds = (at - zero) / 1000;
    const last = out.steps.length - 1;
    if (last >= 0 && (step <= out.steps[last] || seconds < out.xs[last])) continue;
    out.steps.push(step);
    out.xs.push(seconds);
  }
  return out;
}

/** `anchors` with later clock entries (live points) added: those past its last step. */
export function extendClock(anchors, entries, origin) {
  const lastStep = anchors.steps.length ? anchors.steps[anchors.steps.length - 1] : -Infinity;
  const later = (Array.isArray(entries) ? entries : []).filter((e) => e && e.step > lastStep);
  if (later.length === 0) return anchors;
  const more = clockAnchors(later, origin);
  const lastX = anchors.xs.length ? anchors.xs[anchors.xs.length - 1] : -Infinity;
  const steps = [...anchors.steps];
  const xs = [...anchors.xs];
  for (let i = 0; i < more.steps.length; i += 1) {
    if (more.xs[i] < lastX) continue;
    steps.push(more.steps[i]);
    xs.push(more.xs[i]);
  }
  return { steps, xs };
}

/**
 * The x of each of `steps` (ascending) by `anchors`; null when there are no anchors.
 * A single anchor places every step at its x.
 */
export function placeSteps(steps, anchors) {
  const n = anchors.steps.length;
  if (n === 0) return null;
  if (n === 1) return steps.map(() => anchors.xs[0]);
  const out = new Array(steps.length);
  let k = 0; // the segment [k, k + 1] that holds (or is nearest to) the step
  for (let i = 0; i < steps.length; i += 1) {
    const s = steps[i];
    while (k < n - 2 && anchors.steps[k + 1] < s) k += 1;
    const s0 = anchors.steps[k];
    const s1 = anchors.steps[k + 1];
    const x0 = anchors.xs[k];
    const x1 = anchors.xs[k + 1];
    out[i] = s1 === s0 ? x1 : x0 + ((s - s0) * (x1 - x0)) / (s1 - s0);
  }
  return out;
}

/** A line (`{steps, values, mins, maxs}`) drawn over `anchors`' x; null without anchors. */
export function placeLine(line, anchors) {
  const xs = placeSteps(line.steps, anchors);
  return xs === null ? null : { ...line, steps: xs };
}

/** An x axis tick or legend value: steps and epochs as numbers, times as durations. */
export function formatX(axis, value, compact) {
  if (value === null || value === undefined || Number.isNaN(value)) return "";
  if (axis !== "time") return compact(value);
  return duration(value);
}

/** Seconds as "45s", "12m 30s", "3h 05m". */
export function duration(seconds) {
  const sign = seconds < 0 ? "−" : "";
  let s = Math.round(Math.abs(seconds));
  if (s < 60) return `${sign}${s}s`;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (h === 0) return `${sign}${m}m${s ? ` ${String(s).padStart(2, "0")}s` : ""}`;
  return `${sign}${h}h ${String(m).padStart(2, "0")}m`;
}

/** The axis' label under a chart. */
export function axisLabel(axis) {
  return axis === "time" ? "time since the run's first point" : axis;
}
