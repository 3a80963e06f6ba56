import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  LastValues,
  fetchLogTail,
  formatValue,
  isCheckpointLine,
  logMatches,
  logQuery,
  taskSource,
} from "../src/pages/job/logic.js";

const line = (id, source, text) => ({ id, source, stream: "stdout", line: text, time: "t" });

describe("logMatches", () => {
  test("filters by task and by text, ignoring case", () => {
    const l = line(1, "worker-0", "Epoch 3 done");
    assert.equal(logMatches(l, {}), true);
    assert.equal(logMatches(l, { source: "worker-0" }), true);
    assert.equal(logMatches(l, { source: "ps-0" }), false);
    assert.equal(logMatches(l, { q: "epoch" }), true);
    assert.equal(logMatches(l, { q: "loss" }), false);
    assert.equal(logMatches(l, { source: "worker-0", q: "DONE" }), true);
  });
});

describe("logQuery", () => {
  test("asks for the tail first, then for lines after an id, with the filter", () => {
    assert.equal(logQuery({}, { tail: 500 }), "tail=500");
    assert.equal(logQuery({ source: "worker-1", q: "a b" }, { tail: 5 }), "tail=5&source=worker-1&q=a+b");
    assert.equal(logQuery({ q: "x" }, { tail: 5, after: 9 }), "after=9&q=x");
  });
});

describe("fetchLogTail", () => {
  test("a server that knows ?tail= answers in two requests", async () => {
    const asked = [];
    const server = async (url) => {
      asked.push(url);
      return url.includes("tail=") ? { lines: [line(8, "w", "a"), line(9, "w", "b")] } : { lines: [] };
    };
    const got = await fetchLogTail(server, "/logs/", {}, { tail: 2 });
    assert.deepEqual(got.map((l) => l.id), [8, 9]);
    assert.deepEqual(asked, ["/logs/?tail=2", "/logs/?after=9"]);
  });

  test("a server without ?tail= or filters is paged forward and filtered here", async () => {
    const all = Array.from({ length: 25 }, (_, i) => line(i + 1, i % 2 ? "worker-0" : "ps-0", `line ${i + 1}`));
    const server = async (url) => {
      const after = Number(new URL(url, "http://x").searchParams.get("after") ?? 0);
      return { lines: all.filter((l) => l.id > after).slice(0, 10) };
    };
    const got = await fetchLogTail(server, "/logs/", { source: "worker-0" }, { tail: 3 });
    assert.deepEqual(got.map((l) => l.id), [20, 22, 24]);
  });

  test("stops after pagesMax pages", async () => {
    let n = 0;
    const server = async () => ({ lines: [line(++n, "w", "x")] });
    await fetchLogTail(server, "/logs/", {}, { pagesMax: 4 });
    assert.equal(n, 4);
  });
});

describe("LastValues", () => {
  test("keeps the point of the highest step per metric", () => {
    const v = new LastValues();
    assert.equal(v.update("loss", [{ step: 2, value: 0.5 }, { step: 1, value: 0.9 }]), true);
    assert.equal(v.update("loss", [{ step: 1, value: 0.1 }]), false);
    assert.equal(v.update("acc", [{ step: 1, value: NaN }]), false);
    assert.equal(v.update("acc", [{ step: 3, value: 0.7 }]), true);
    assert.deepEqual(v.rows(), [
      ["acc", { step: 3, value: 0.7 }],
      ["loss", { step: 2, value: 0.5 }],
    ]);
  });
});

test("formatValue, isCheckpointLine, taskSource", () => {
  assert.equal(formatValue(0.123456789), "0.123457");
  assert.equal(formatValue(42), "42");
  assert.equal(isCheckpointLine(line(1, "c", "saved checkpoint ckpt-10")), true);
  assert.equal(isCheckpointLine(line(1, "c", "epoch 1")), false);
  assert.equal(taskSource({ role: "worker", index: 2 }), "worker-2");
  assert.equal(taskSource({ role: "coordinator", index: null }), "coordinator");
});
