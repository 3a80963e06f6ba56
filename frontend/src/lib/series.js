// Data logic of the live job page, free of the DOM so node's test runner can cover it.
//
// A series is held as two parallel columns, `{steps: number[], values: number[]}`,
// ascending by step with one value per step — the shape uPlot's setData() takes.

export const LOG_LINE_CAP = 2000;
export const BACKOFF_MIN_MS = 1000;
export const BACKOFF_MAX_MS = 10000;

const isFiniteNumber = (x) => typeof x === "number" && Number.isFinite(x);

/** An empty series. */
export function emptySeries() {
  return { steps: [], values: [] };
}

/** Valid `{step, value}` points sorted by step, one per step: the last one given wins. */
export function normalizePoints(points) {
  const byStep = new Map();
  for (const p of Array.isArray(points) ? points : []) {
    if (p && isFiniteNumber(p.step) && isFiniteNumber(p.value)) {
      byStep.delete(p.step); // re-insert so Map order is arrival order of the winner
      byStep.set(p.step, p.value);
    }
  }
  return [...byStep].sort((a, b) => a[0] - b[0]).map(([step, value]) => ({ step, value }));
}

/**
 * Merge points into a series; returns a new series (the input is not modified).
 *
 * Points are deduplicated by step; an incoming point replaces an existing one at the same
 * step, so a refetch after a reconnect overwrites whatever the live feed delivered.
 */
export function mergeSeries(series, points) {
  const incoming = normalizePoints(points);
  const { steps, values } = series;
  if (incoming.length === 0) return series;
  // The live case: every new point is past the end, so append.
  if (steps.length === 0 || incoming[0].step > steps[steps.length - 1]) {
    return {
      steps: steps.concat(incoming.map((p) => p.step)),
      values: values.concat(incoming.map((p) => p.value)),
    };
  }
  const out = emptySeries();
  let i = 0;
  let j = 0;
  while (i < steps.length || j < incoming.length) {
    const a = i < steps.length ? steps[i] : Infinity;
    const b = j < incoming.length ? incoming[j].step : Infinity;
    if (b <= a) {
      out.steps.push(b);
      out.values.push(incoming[j].value);
      j += 1;
      if (a === b) i += 1;
    } else {
      out.steps.push(a);
      out.values.push(values[i]);
      i += 1;
    }
  }
  return out;
}

// A chart line is four parallel columns, `{steps, values, mins, maxs}`, ascending by step
// with one entry per step: the value drawn as the line, and the band behind it. A raw
// point is its own bucket (min = max = value).

/** An empty chart line. */
export function emptyLine() {
  return { steps: [], values: [], mins: [], maxs: [] };
}

/**
 * Valid points of the metrics API — buckets `{step, value, min, max, count}` or raw
 * `{step, value}` — sorted by step, one per step (the last one given wins), each with a
 * min and max that hold its value.
 */
export function normalizeBuckets(points) {
  const byStep = new Map();
  for (const p of Array.isArray(points) ? points : []) {
    if (!p || !isFiniteNumber(p.step) || !isFiniteNumber(p.value)) continue;
    const min = isFiniteNumber(p.min) ? Math.min(p.min, p.value) : p.value;
    const max = isFiniteNumber(p.max) ? Math.max(p.max, p.value) : p.value;
    byStep.delete(p.step);
    byStep.set(p.step, { step: p.step, value: p.value, min, max });
  }
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

/** A chart line from the metrics API's points of one series. */
export function lineFromPoints(points) {
  const line = emptyLine();
  for (const b of normalizeBuckets(points)) {
    line.steps.push(b.step);
    line.values.push(b.value);
    line.mins.push(b.min);
    line.maxs.push(b.max);
  }
  return line;
}

/**
 * Merge points (live `{step, value}` or buckets) into a line; returns a new line, or the
 * same one when no point is valid. Same rules as mergeSeries: incoming points win on a step.
 */
export function mergeLine(line, points) {
  const incoming = normalizeBuckets(points);
  if (incoming.length === 0) return line;
  const { steps } = line;
  // The live case: every new point is past the end, so append.
  if (steps.length === 0 || incoming[0].step > steps[steps.length - 1]) {
    return {
      steps: steps.concat(incoming.map((p) => p.step)),
      values: line.values.concat(incoming.map((p) => p.value)),
      mins: line.mins.concat(incoming.map((p) => p.min)),
      maxs: line.maxs.concat(incoming.map((p) => p.max)),
    };
  }
  const out = emptyLine();
  const push = (step, value, min, max) => {
    out.steps.push(step);
    out.values.push(value);
    out.mins.push(min);
    out.maxs.push(max);
  };
  let i = 0;
  let j = 0;
  while (i < steps.length || j < incoming.length) {
    const a = i < steps.length ? steps[i] : Infinity;
    const b = j < incoming.length ? incoming[j].step : Infinity;
    if (b <= a) {
      const p = incoming[j];
      push(p.step, p.value, p.min, p.max);
      j += 1;
      if (a === b) i += 1;
    } else {
      push(a, line.values[i], line.mins[i], line.maxs[i]);
      i += 1;
    }
  }
  return out;
}

/** `fresh` (a refetch) followed by the entries of `held` past its last step: the live
 * points that arrived after the server answered. */
export function keepNewer(fresh, held) {
  const last = fresh.steps.length ? fresh.steps[fresh.steps.length - 1] : -Infinity;
  let k = held.steps.length;
  while (k > 0 && held.steps[k - 1] > last) k -= 1;
  if (k === held.steps.length) return fresh;
  return {
    steps: fresh.steps.concat(held.steps.slice(k)),
    values: fresh.values.concat(held.values.slice(k)),
    mins: fresh.mins.concat(held.mins.slice(k)),
    maxs: fresh.maxs.concat(held.maxs.slice(k)),
  };
}

/**
 * uPlot data for several lines on one chart: `[steps, value1, min1, max1, value2, ...]`
 * over the union of their steps, null where a line has no entry.
 */
export function alignLines(lines) {
  if (lines.length === 1) {
    const [l] = lines;
    return [l.steps, l.values, l.mins, l.maxs];
  }
  const all = new Set();
  for (const l of lines) for (const s of l.steps) all.add(s);
  const steps = [...all].sort((a, b) => a - b);
  const data = [steps];
  for (const l of lines) {
    const values = new Array(steps.length).fill(null);
    const mins = new Array(steps.length).fill(null);
    const maxs = new Array(steps.length).fill(null);
    let k = 0;
    for (let i = 0; i < l.steps.length; i += 1) {
      while (steps[k] < l.steps[i]) k += 1;
      values[k] = l.values[i];
      mins[k] = l.mins[i];
      maxs[k] = l.maxs[i];
    }
    data.push(values, mins, maxs);
  }
  return data;
}

/**
 * A line smoothed by an exponential moving average (TensorBoard's slider): each value
 * becomes `weight` × the smoothed value before it + (1 − `weight`) × itself, bias-corrected
 * so the first points are not pulled towards zero. `weight` 0 returns the line as it is;
 * the min/max band stays the raw one.
 */
export function smoothLine(line, weight) {
  const w = Math.min(Math.max(Number(weight) || 0, 0), 0.999);
  if (w === 0) return line;
  let last = 0;
  let debias = 1;
  const values = line.values.map((v) => {
    last = last * w + (1 - w) * v;
    debias *= w;
    return last / (1 - debias);
  });
  return { ...line, values };
}

/** Whether every value, min and max of the lines is above zero: a log axis can show them. */
export function allPositive(lines) {
  return lines.every((l) => [l.values, l.mins, l.maxs].every((xs) => xs.every((v) => v > 0)));
}

export const MAX_POINTS_MIN = 100;
export const MAX_POINTS_MAX = 2000;

/** How many buckets to ask for to draw a chart `width` CSS pixels wide: one per pixel. */
export function maxPointsFor(width) {
  const n = Math.round(Number(width) || 0);
  return Math.min(MAX_POINTS_MAX, Math.max(MAX_POINTS_MIN, n));
}

/** The first track of a computed `grid-template-columns` ("590px 590px"), in pixels. */
export function firstTrackWidth(columns) {
  const match = /^\s*([\d.]+)px/.exec(String(columns ?? ""));
  return match ? Number(match[1]) : null;
}

/** Group flat `{name, step, value}` points (a live "metrics" message) by metric name. */
export function groupByName(points) {
  const groups = new Map();
  for (const p of Array.isArray(points) ? points : []) {
    if (!p || typeof p.name !== "string" || p.name === "") continue;
    if (!groups.has(p.name)) groups.set(p.name, []);
    groups.get(p.name).push(p);
  }
  return groups;
}

/** The `series` object of a metrics API response as a Map of name to points (raw
 * `{step, value, time}` or buckets `{step, value, min, max, count}`). */
export function parseMetricsResponse(body) {
  const series = body && typeof body.series === "object" && body.series !== null ? body.series : {};
  const groups = new Map();
  for (const [name, points] of Object.entries(series)) {
    if (Array.isArray(points)) groups.set(name, points);
  }
  return groups;
}

/** The lines of a logs API response. */
export function parseLogsResponse(body) {
  const lines = body && Array.isArray(body.lines) ? body.lines : [];
  return lines.filter((l) => l && typeof l.line === "string");
}

/**
 * Parse one message of the job feed; null for anything malformed or unknown.
 *
 * Returns `{type: "metrics", points}`, `{type: "state", state, message, pendingReason}`,
 * `{type: "task", task, role, index, state}` or `{type: "logs", lines}`.
 */
export function parseMessage(text) {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    return null;
  }
  if (!msg || typeof msg !== "object") return null;
  switch (msg.type) {
    case "metrics":
      return Array.isArray(msg.points) ? { type: "metrics", points: msg.points } : null;
    case "state":
      if (typeof msg.state !== "string") return null;
      return {
        type: "state",
        state: msg.state,
        message: typeof msg.message === "string" ? msg.message : "",
        pendingReason: typeof msg.pending_reason === "string" ? msg.pending_reason : "",
      };
    case "task":
      if (!Number.isInteger(msg.task) || typeof msg.state !== "string") return null;
      return {
        type: "task",
        task: msg.task,
        role: typeof msg.role === "string" ? msg.role : "",
        index: Number.isInteger(msg.index) ? msg.index : null,
        state: msg.state,
      };
    case "logs":
      return Array.isArray(msg.lines) ? { type: "logs", lines: parseLogsResponse(msg) } : null;
    case "event":
      if (typeof msg.kind !== "string" || typeof msg.time !== "string") return null;
      return {
        type: "event",
        time: msg.time,
        kind: msg.kind,
        toState: typeof msg.to_state === "string" ? msg.to_state : "",
        reason: typeof msg.reason === "string" ? msg.reason : "",
        actor: typeof msg.actor === "string" ? msg.actor : "",
      };
    default:
      return null;
  }
}

const COMPACT = new Intl.NumberFormat("en", { notation: "compact", maximumSignificantDigits: 4 });

/** Axis labels that fit the chart's gutter: 0.9231, 12.5, 190k, 1.2M. */
export function compactNumber(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "";
  return Math.abs(value) >= 10000 ? COMPACT.format(value) : String(Number(value.toPrecision(4)));
}

/** An event's line as the page's server-rendered list shows it: time, what, why, who. */
export function formatEvent(e) {
  const time = e.time.length >= 19 ? e.time.slice(11, 19) : e.time;
  const what = e.toState ? `${e.kind} → ${e.toState}` : e.kind;
  return { time, text: ` ${what} — ${e.reason} `, actor: e.actor ? `(${e.actor})` : "" };
}

const ERROR_LINE = /\b(Traceback|[A-Za-z]*Error|ERROR|Exception|CRITICAL|FATAL)\b/;

/** CSS classes of a log line: stderr is normal output for Python logging, so only lines
 * that look like errors stand out. */
export function logLineClass(l) {
  if (ERROR_LINE.test(l.line)) return "log-line error";
  return l.stream === "stderr" ? "log-line stderr" : "log-line";
}

/** A state name made safe for a class name (`state-<x>`). */
export function stateClass(state) {
  const safe = String(state).toLowerCase().replace(/[^a-z0-9_-]/g, "");
  return `state state-${safe || "unknown"}`;
}

/** The text shown next to the state badge: the pending reason while pending, else the message. */
export function stateReason(msg) {
  return msg.state === "pending" ? msg.pendingReason || msg.message : msg.message;
}

/** One log line as shown: `[source] text`. */
export function formatLogLine(l) {
  return l.source ? `[${l.source}] ${l.line}` : l.line;
}

/**
 * The live lines not already at the end of the history.
 *
 * The feed is opened before the history is fetched so nothing falls in between; lines
 * that arrived on both are the longest prefix of `live` that is also a suffix of `history`.
 */
export function dropOverlap(history, live) {
  // Lines carry database ids: keep exactly the live lines newer than the history.
  const lastId = history.length ? history[history.length - 1].id : undefined;
  if (Number.isInteger(lastId) && live.every((l) => Number.isInteger(l.id))) {
    return live.filter((l) => l.id > lastId);
  }
  const same = (a, b) => a.source === b.source && a.stream === b.stream && a.line === b.line;
  for (let k = Math.min(history.length, live.length); k > 0; k -= 1) {
    let match = true;
    for (let m = 0; m < k && match; m += 1) {
      match = same(history[history.length - k + m], live[m]);
    }
    if (match) return live.slice(k);
  }
  return live;
}

/** The delay before the next reconnect attempt: 1 s, doubling, at most 10 s. */
export function nextBackoff(previousMs) {
  if (!previousMs) return BACKOFF_MIN_MS;
  return Math.min(previousMs * 2, BACKOFF_MAX_MS);
}

/** The WebSocket URL for a path on the page's own host. */
export function wsUrl(location, path) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}
