// Data logic of the job page, free of the DOM so node's test runner covers it.

import { parseLogsResponse } from "../../lib/series.js";

export const JOB_TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
// Lines the page asks for when it opens (or a filter changes): the newest ones.
export const LOG_TAIL = 500;
// A server without `?tail=` answers from the first line; then page forward at most this far.
export const LOG_PAGES_MAX = 20;
const CHECKPOINT_LINE = /checkpoint/i;

/** Does a log line pass the page's filter (`source`: a task such as worker-0; `q`: text,
 * case-insensitive)? The server filters too; this keeps live lines and older servers right. */
export function logMatches(line, { source = "", q = "" } = {}) {
  if (source && line.source !== source) return false;
  if (q && !line.line.toLowerCase().includes(q.toLowerCase())) return false;
  return true;
}

/** Log lines that mention a checkpoint (saved, resumed from). */
export function isCheckpointLine(line) {
  return CHECKPOINT_LINE.test(line.line);
}

/** The query string of a logs request: the tail first, then lines after an id. */
export function logQuery({ source = "", q = "" } = {}, { tail = null, after = null } = {}) {
  const params = new URLSearchParams();
  if (after !== null) params.set("after", String(after));
  else if (tail !== null) params.set("tail", String(tail));
  if (source) params.set("source", source);
  if (q) params.set("q", q);
  return params.toString();
}

/**
 * The newest `tail` lines matching `filter`, oldest first.
 *
 * Asks for `?tail=` and then for anything newer (`?after=`). A server that ignores `tail`
 * answers from the first line, so keep paging forward (at most `pagesMax` pages), keeping
 * the newest `tail`; one that ignores the filter is filtered here.
 */
export async function fetchLogTail(getJSON, url, filter, { tail = LOG_TAIL, pagesMax = LOG_PAGES_MAX } = {}) {
  let lines = [];
  let after = null;
  const sep = url.includes("?") ? "&" : "?";
  for (let page = 0; page < pagesMax; page += 1) {
    const got = parseLogsResponse(await getJSON(`${url}${sep}${logQuery(filter, { tail, after })}`));
    if (got.length === 0) break;
    lines = lines.concat(got.filter((l) => logMatches(l, filter))).slice(-tail);
    const last = got[got.length - 1].id;
    if (!Number.isInteger(last) || (after !== null && last <= after)) break;
    after = last;
  }
  return lines;
}

/** The last reported point of each metric: `update` with points as they come (any order). */
export class LastValues {
  constructor() {
    this.byName = new Map(); // name -> {step, value}
  }

  /** Take `points` ({step, value}) of metric `name`; true if the last value changed. */
  update(name, points) {
    let changed = false;
    for (const p of Array.isArray(points) ? points : []) {
      if (!p || !Number.isFinite(p.step) || !Number.isFinite(p.value)) continue;
      const known = this.byName.get(name);
      if (!known || p.step >= known.step) {
        if (!known || known.step !== p.step || known.value !== p.value) changed = true;
        this.byName.set(name, { step: p.step, value: p.value });
      }
    }
    return changed;
  }

  /** [name, {step, value}] pairs by name. */
  rows() {
    return [...this.byName].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }
}

/** A metric value as the page shows it: up to 6 significant digits. */
export function formatValue(value) {
  if (!Number.isFinite(value)) return String(value);
  if (Number.isInteger(value)) return String(value);
  return String(Number(value.toPrecision(6)));
}

/** The task's log source name (`worker-0`), as the server names log lines. */
export function taskSource(msg) {
  return msg.index === null || msg.index === undefined ? msg.role : `${msg.role}-${msg.index}`;
}
