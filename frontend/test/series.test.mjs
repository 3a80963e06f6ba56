import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  dropOverlap,
  emptySeries,
  compactNumber,
  formatEvent,
  formatLogLine,
  groupByName,
  logLineClass,
  mergeSeries,
  nextBackoff,
  normalizePoints,
  parseLogsResponse,
  parseMessage,
  parseMetricsResponse,
  stateClass,
  stateReason,
  wsUrl,
} from "../src/lib/series.js";

const pts = (...pairs) => pairs.map(([step, value]) => ({ step, value, time: "2025-01-01T00:00:00Z" }));

describe("normalizePoints", () => {
  test("sorts by step", () => {
    assert.deepEqual(normalizePoints(pts([3, 0.3], [1, 0.1], [2, 0.2])), [
      { step: 1, value: 0.1 },
      { step: 2, value: 0.2 },
      { step: 3, value: 0.3 },
    ]);
  });

  test("keeps the last point of a repeated step", () => {
    assert.deepEqual(normalizePoints(pts([1, 0.1], [2, 0.2], [1, 0.9])), [
      { step: 1, value: 0.9 },
      { step: 2, value: 0.2 },
    ]);
  });

  test("drops points without finite numbers", () => {
    const points = [{ step: 1, value: "x" }, { step: null, value: 1 }, null, { step: 2, value: NaN }, { step: 3, value: 3 }];
    assert.deepEqual(normalizePoints(points), [{ step: 3, value: 3 }]);
    assert.deepEqual(normalizePoints(undefined), []);
  });
});

describe("mergeSeries", () => {
  test("builds columns from nothing", () => {
    assert.deepEqual(mergeSeries(emptySeries(), pts([2, 0.5], [1, 0.9])), { steps: [1, 2], values: [0.9, 0.5] });
  });

  test("appends points past the end", () => {
    const s = mergeSeries(emptySeries(), pts([1, 0.9], [2, 0.8]));
    assert.deepEqual(mergeSeries(s, pts([3, 0.7])), { steps: [1, 2, 3], values: [0.9, 0.8, 0.7] });
  });

  test("interleaves and lets incoming points win on the same step", () => {
    const s = mergeSeries(emptySeries(), pts([1, 1], [3, 3], [5, 5]));
    assert.deepEqual(mergeSeries(s, pts([0, 0], [3, 30], [4, 4], [6, 6])), {
      steps: [0, 1, 3, 4, 5, 6],
      values: [0, 1, 30, 4, 5, 6],
    });
  });

  test("a refetch covering the live points changes nothing but fills gaps", () => {
    let s = mergeSeries(emptySeries(), pts([1, 1], [2, 2]));
    s = mergeSeries(s, pts([5, 5])); // live, after a gap
    s = mergeSeries(s, pts([1, 1], [2, 2], [3, 3], [4, 4], [5, 5]));
    assert.deepEqual(s, { steps: [1, 2, 3, 4, 5], values: [1, 2, 3, 4, 5] });
  });

  test("does not modify its input and returns it when nothing is valid", () => {
    const s = mergeSeries(emptySeries(), pts([1, 1], [3, 3]));
    const copy = structuredClone(s);
    mergeSeries(s, pts([2, 2]));
    mergeSeries(s, pts([9, 9]));
    assert.deepEqual(s, copy);
    assert.equal(mergeSeries(s, [{ step: "a", value: 1 }]), s);
  });
});

describe("response and message parsing", () => {
  test("metrics response by name", () => {
    const groups = parseMetricsResponse({ series: { train_loss: pts([1, 0.9]), test_rmse: pts([1, 1.2]), bad: 3 } });
    assert.deepEqual([...groups.keys()], ["train_loss", "test_rmse"]);
    assert.equal(parseMetricsResponse(null).size, 0);
    assert.equal(parseMetricsResponse({}).size, 0);
  });

  test("groups live points by name", () => {
    const groups = groupByName([
      { name: "train_loss", step: 1, value: 0.9 },
      { name: "test_rmse", step: 1, value: 1.1 },
      { name: "train_loss", step: 2, value: 0.8 },
      { step: 3, value: 1 },
    ]);
    assert.deepEqual([...groups.keys()], ["train_loss", "test_rmse"]);
    assert.equal(groups.get("train_loss").length, 2);
  });

  test("logs response keeps lines with text", () => {
    const lines = parseLogsResponse({ lines: [{ id: 1, source: "worker-0", stream: "stdout", line: "hi" }, { id: 2 }] });
    assert.equal(lines.length, 1);
    assert.deepEqual(parseLogsResponse({ results: [] }), []);
  });

  test("metrics message", () => {
    const msg = parseMessage(JSON.stringify({ type: "metrics", points: [{ name: "train_loss", step: 12, value: 0.91 }] }));
    assert.equal(msg.type, "metrics");
    assert.equal(msg.points.length, 1);
  });

  test("state message", () => {
    const msg = parseMessage(JSON.stringify({ type: "state", state: "pending", message: "", pending_reason: "quota" }));
    assert.deepEqual(msg, { type: "state", state: "pending", message: "", pendingReason: "quota" });
    assert.equal(stateReason(msg), "quota");
    assert.equal(stateReason({ ...msg, state: "failed", message: "ps-0 exited 1" }), "ps-0 exited 1");
    assert.equal(stateReason(parseMessage('{"type":"state","state":"running"}')), "");
  });

  test("task message", () => {
    const msg = parseMessage(JSON.stringify({ type: "task", task: 31, role: "ps", index: 0, state: "running" }));
    assert.deepEqual(msg, { type: "task", task: 31, role: "ps", index: 0, state: "running" });
    assert.equal(parseMessage(JSON.stringify({ type: "task", task: "31", state: "running" })), null);
  });

  test("logs message", () => {
    const msg = parseMessage(JSON.stringify({ type: "logs", lines: [{ source: "worker-0", stream: "stderr", line: "boom" }] }));
    assert.equal(msg.lines[0].line, "boom");
  });

  test("junk is ignored", () => {
    for (const text of ["", "not json", "null", "42", '{"type":"nope"}', '{"type":"metrics"}', '{"type":"state"}']) {
      assert.equal(parseMessage(text), null, text);
    }
  });
});

describe("presentation helpers", () => {
  test("state class is safe", () => {
    assert.equal(stateClass("running"), "state state-running");
    assert.equal(stateClass('x" onclick="y'), "state state-xonclicky");
    assert.equal(stateClass(""), "state state-unknown");
  });

  test("log line prefix", () => {
    assert.equal(formatLogLine({ source: "ps-1", line: "ready" }), "[ps-1] ready");
    assert.equal(formatLogLine({ source: "", line: "ready" }), "ready");
  });

  test("backoff doubles from 1 s up to 10 s", () => {
    const delays = [];
    let d = 0;
    for (let i = 0; i < 6; i += 1) delays.push((d = nextBackoff(d)));
    assert.deepEqual(delays, [1000, 2000, 4000, 8000, 10000, 10000]);
  });

  test("websocket URL follows the page scheme", () => {
    assert.equal(wsUrl({ protocol: "http:", host: "h:8000" }, "/ws/jobs/7/"), "ws://h:8000/ws/jobs/7/");
    assert.equal(wsUrl({ protocol: "https:", host: "h" }, "/ws/jobs/7/"), "wss://h/ws/jobs/7/");
  });
});

describe("dropOverlap", () => {
  const l = (line, source = "worker-0") => ({ source, stream: "stdout", line });

  test("drops live lines already at the end of the history", () => {
    assert.deepEqual(dropOverlap([l("a"), l("b"), l("c")], [l("b"), l("c"), l("d")]), [l("d")]);
  });

  test("keeps everything when nothing overlaps", () => {
    assert.deepEqual(dropOverlap([l("a")], [l("b")]), [l("b")]);
    assert.deepEqual(dropOverlap([], [l("b")]), [l("b")]);
    assert.deepEqual(dropOverlap([l("a")], []), []);
  });

  test("uses ids when both sides have them, even for repeated text", () => {
    const h = [{ ...l("x"), id: 7 }, { ...l("x"), id: 8 }];
    const live = [{ ...l("x"), id: 8 }, { ...l("x"), id: 9 }];
    assert.deepEqual(dropOverlap(h, live), [{ ...l("x"), id: 9 }]);
  });

  test("compares the source too", () => {
    assert.deepEqual(dropOverlap([l("a", "ps-0")], [l("a", "worker-0")]), [l("a", "worker-0")]);
  });
});

describe("events and log lines", () => {
  test("an event message parses and formats like the server-rendered list", () => {
    const msg = parseMessage(JSON.stringify({
      type: "event", time: "2026-11-21T06:54:58.572953+00:00", kind: "state",
      from_state: "running", to_state: "restarting", reason: "ps 0 exited", actor: "node 1",
    }));
    assert.deepEqual(formatEvent(msg), {
      time: "06:54:58", text: " state → restarting — ps 0 exited ", actor: "(node 1)",
    });
    assert.equal(parseMessage(JSON.stringify({ type: "event", kind: 3 })), null);
  });

  test("only error-looking lines are marked as errors", () => {
    assert.equal(logLineClass({ stream: "stderr", line: "INFO ps 0 serving" }), "log-line stderr");
    assert.equal(logLineClass({ stream: "stderr", line: "Traceback (most recent call last):" }),
      "log-line error");
    assert.equal(logLineClass({ stream: "stdout", line: "ValueError: bad" }), "log-line error");
    assert.equal(logLineClass({ stream: "stdout", line: "epoch 1" }), "log-line");
  });
});

test("axis labels stay short", () => {
  assert.equal(compactNumber(190000), "190K");
  assert.equal(compactNumber(1234567), "1.235M");
  assert.equal(compactNumber(0.92312345), "0.9231");
  assert.equal(compactNumber(12.5), "12.5");
  assert.equal(compactNumber(null), "");
});

describe("smoothing and the log axis", async () => {
  const { smoothLine, allPositive } = await import("../src/lib/series.js");
  const line = { steps: [1, 2, 3, 4], values: [4, 0, 4, 0], mins: [4, 0, 4, 0], maxs: [4, 0, 4, 0] };

  test("no smoothing returns the line itself", () => {
    assert.equal(smoothLine(line, 0), line);
  });

  test("an exponential moving average, bias-corrected, leaves the band raw", () => {
    const smoothed = smoothLine(line, 0.5);
    assert.equal(smoothed.values[0], 4); // not pulled towards zero
    assert.ok(Math.abs(smoothed.values[1] - 4 / 3) < 1e-9);
    assert.ok(Math.max(...smoothed.values.slice(1)) < 4 && Math.min(...smoothed.values) > 0);
    assert.deepEqual(smoothed.mins, line.mins);
    assert.deepEqual(line.values, [4, 0, 4, 0]); // the held line is not changed
  });

  test("a log axis only where every value is above zero", () => {
    assert.equal(allPositive([line]), false);
    assert.equal(allPositive([{ ...line, values: [1, 2], mins: [1, 2], maxs: [1, 2] }]), true);
  });
});
