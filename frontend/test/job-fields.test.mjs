import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { parseJobMessage, preemptionsText, shownTime, stateChanged } from "../src/pages/job/fields.js";

const state = (fields) => JSON.stringify({ type: "state", state: "running", message: "", ...fields });

describe("parseJobMessage", () => {
  test("a state message brings the job's times and counters", () => {
    const msg = parseJobMessage(
      state({
        pending_reason: "",
        started_at: "2026-01-01T11:00:00+00:00",
        finished_at: null,
        restarts: 2,
        infra_restarts: 4,
        preemptions: 1,
        workers: 3,
      }),
    );
    assert.deepEqual(msg, {
      type: "state",
      state: "running",
      message: "",
      pendingReason: "",
      startedAt: "2026-01-01T11:00:00+00:00",
      finishedAt: null,
      restarts: 2,
      infraRestarts: 4,
      preemptions: 1,
      workers: 3,
    });
  });

  test("fields a message lacks or gets wrong are left out, so the page keeps its own", () => {
    const msg = parseJobMessage(state({ started_at: "soon", restarts: -1, infra_restarts: null, preemptions: "2", workers: 1.5 }));
    assert.deepEqual(msg, { type: "state", state: "running", message: "", pendingReason: "" });
  });

  test("a task message keeps a preparing task's progress", () => {
    const text = JSON.stringify({ type: "task", task: 4, role: "worker", index: 0, state: "preparing", message: "uv: 3/9" });
    assert.equal(parseJobMessage(text).message, "uv: 3/9");
    assert.equal(parseJobMessage(JSON.stringify({ type: "task", task: 4, state: "running" })).message, "");
  });

  test("a result message is rows of two strings; anything else in it is dropped", () => {
    const text = JSON.stringify({ type: "result", rows: [["rmse", "0.91"], ["bad", 3], "x", ["epochs", "5"]] });
    assert.deepEqual(parseJobMessage(text), { type: "result", rows: [["rmse", "0.91"], ["epochs", "5"]] });
    assert.equal(parseJobMessage(JSON.stringify({ type: "result" })), null);
  });

  test("other messages read as lib/series.js reads them; garbage is null", () => {
    assert.deepEqual(parseJobMessage(JSON.stringify({ type: "metrics", points: [] })), { type: "metrics", points: [] });
    assert.equal(parseJobMessage("{not json"), null);
    assert.equal(parseJobMessage(JSON.stringify({ type: "nope" })), null);
  });
});

describe("shownTime", () => {
  test("renders UTC as the server does, whatever offset the time is written in", () => {
    assert.equal(shownTime("2026-01-01T11:00:05+00:00"), "2026-01-01 11:00:05");
    assert.equal(shownTime("2026-01-01T12:00:05.123+01:00"), "2026-01-01 11:00:05");
    assert.equal(shownTime("never"), "");
  });
});

describe("preemptionsText", () => {
  test("says nothing until the job was preempted, then how often", () => {
    assert.equal(preemptionsText(0), "");
    assert.equal(preemptionsText(undefined), "");
    assert.equal(preemptionsText(1), "; preempted 1 time");
    assert.equal(preemptionsText(3), "; preempted 3 times");
  });
});

describe("stateChanged", () => {
  test("a new state or pending reason refreshes the queue box; the same fields do not", () => {
    const before = { state: "pending", pendingReason: "no room" };
    assert.equal(stateChanged(before, { state: "pending", pendingReason: "no room", restarts: 1 }), false);
    assert.equal(stateChanged(before, { state: "pending", pendingReason: "quota" }), true);
    assert.equal(stateChanged(before, { state: "starting", pendingReason: "" }), true);
  });
});
