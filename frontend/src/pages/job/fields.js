// The job's own fields over the feed (state, times, restarts, result), free of the DOM so
// node's test runner covers it. lib/series.js parses the messages every page shares; the
// job page reads more of them: a `state` message carries the job as stored
// (telemetry/live.py `job_fields`), and `result` the rows of what its entrypoint returned.

import { parseMessage } from "../../lib/series.js";

const isTime = (value) => typeof value === "string" && !Number.isNaN(Date.parse(value));
const isCount = (value) => Number.isInteger(value) && value >= 0;

/**
 * One message of the job feed as the job page reads it; null for anything malformed.
 *
 * `state` adds `startedAt`/`finishedAt` (an ISO time, or null: not yet), `restarts`,
 * `infraRestarts`, `preemptions` and `workers` to lib/series.js's; each is left out when the message has
 * none (an older server), so the page keeps what it shows. `task` keeps a preparing task's
 * `message`; `result` is `{rows: [[name, value], …]}`.
 */
export function parseJobMessage(text) {
  const msg = parseMessage(text);
  if (msg?.type === "state") return { ...msg, ...jobFields(JSON.parse(text)) };
  if (msg?.type === "task") {
    const raw = JSON.parse(text);
    return { ...msg, message: typeof raw.message === "string" ? raw.message : "" };
  }
  if (msg !== null) return msg;
  let raw;
  try {
    raw = JSON.parse(text);
  } catch {
    return null;
  }
  if (raw?.type !== "result" || !Array.isArray(raw.rows)) return null;
  const rows = raw.rows.filter(
    (row) => Array.isArray(row) && row.length === 2 && row.every((cell) => typeof cell === "string"),
  );
  return { type: "result", rows };
}

function jobFields(raw) {
  const fields = {};
  for (const [from, to] of [
    ["started_at", "startedAt"],
    ["finished_at", "finishedAt"],
  ]) {
    if (raw[from] === null) fields[to] = null;
    else if (isTime(raw[from])) fields[to] = raw[from];
  }
  for (const [from, to] of [
    ["restarts", "restarts"],
    ["infra_restarts", "infraRestarts"],
    ["preemptions", "preemptions"],
    ["workers", "workers"],
  ]) {
    if (isCount(raw[from])) fields[to] = raw[from];
  }
  return fields;
}

/** A time as the server renders it (`Y-m-d H:i:s`, UTC: the server's TIME_ZONE). */
export function shownTime(iso) {
  const when = Date.parse(iso);
  if (Number.isNaN(when)) return "";
  return new Date(when).toISOString().slice(0, 19).replace("T", " ");
}

/** What follows the restart count: `; preempted 2 times`, or nothing. */
export function preemptionsText(preemptions) {
  if (!isCount(preemptions) || preemptions === 0) return "";
  return `; preempted ${preemptions} time${preemptions === 1 ? "" : "s"}`;
}

/** Did the state or its reason change? Then the queue box is fetched again. */
export function stateChanged(before, msg) {
  return before.state !== msg.state || before.pendingReason !== (msg.pendingReason ?? "");
}
