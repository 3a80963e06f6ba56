import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { loadMetrics, withMaxPoints } from "../src/lib/metrics.js";
import {
  alignLines,
  emptyLine,
  firstTrackWidth,
  keepNewer,
  lineFromPoints,
  maxPointsFor,
  mergeLine,
  normalizeBuckets,
  parseMetricsResponse,
} from "../src/lib/series.js";

const bucket = (step, value, min, max, count = 2) => ({ step, value, min, max, count });

describe("buckets from the metrics API", () => {
  test("downsampled buckets keep their min and max", () => {
    assert.deepEqual(normalizeBuckets([bucket(20, 0.5, 0.4, 0.9), bucket(10, 1, 0.8, 1.2)]), [
      { step: 10, value: 1, min: 0.8, max: 1.2 },
      { step: 20, value: 0.5, min: 0.4, max: 0.9 },
    ]);
  });

  test("raw points are their own bucket", () => {
    assert.deepEqual(normalizeBuckets([{ step: 3, value: 0.3, time: "2025-01-01T00:00:00Z" }]), [
      { step: 3, value: 0.3, min: 0.3, max: 0.3 },
    ]);
  });

  test("the band always holds the value; junk is dropped; the last of a step wins", () => {
    const points = [bucket(1, 5, 6, 4), { step: 2, value: 1, min: "x", max: null }, { step: "3", value: 1 }, null,
      bucket(4, 1, 0, 2), bucket(4, 3, 3, 3)];
    assert.deepEqual(normalizeBuckets(points), [
      { step: 1, value: 5, min: 5, max: 5 },
      { step: 2, value: 1, min: 1, max: 1 },
      { step: 4, value: 3, min: 3, max: 3 },
    ]);
    assert.deepEqual(normalizeBuckets(undefined), []);
  });

  test("a line is four columns", () => {
    assert.deepEqual(lineFromPoints([bucket(2, 0.5, 0.1, 0.7), { step: 1, value: 0.9 }]), {
      steps: [1, 2], values: [0.9, 0.5], mins: [0.9, 0.1], maxs: [0.9, 0.7],
    });
  });

  test("the response parser reads both shapes", () => {
    const body = { downsampled: true, series: { loss: [bucket(9, 1, 0, 2, 10)], acc: [{ step: 1, value: 1 }] } };
    assert.deepEqual([...parseMetricsResponse(body).keys()], ["loss", "acc"]);
  });
});

describe("live points on a line", () => {
  test("append past the end", () => {
    const line = lineFromPoints([bucket(10, 1, 0, 2)]);
    assert.deepEqual(mergeLine(line, [{ step: 11, value: 3 }]), {
      steps: [10, 11], values: [1, 3], mins: [0, 3], maxs: [2, 3],
    });
  });

  test("interleave, the incoming point winning its step, without touching the input", () => {
    const line = lineFromPoints([bucket(10, 1, 0, 2), bucket(20, 2, 1, 3)]);
    const copy = structuredClone(line);
    assert.deepEqual(mergeLine(line, [{ step: 15, value: 5 }, { step: 20, value: 7 }]), {
      steps: [10, 15, 20], values: [1, 5, 7], mins: [0, 5, 7], maxs: [2, 5, 7],
    });
    assert.deepEqual(line, copy);
    assert.equal(mergeLine(line, [{ step: "x", value: 1 }]), line);
    assert.deepEqual(mergeLine(emptyLine(), [{ step: 1, value: 1 }]).steps, [1]);
  });

  test("a refetch keeps the live points newer than its answer", () => {
    const held = lineFromPoints([{ step: 1, value: 1 }, { step: 5, value: 5 }, { step: 6, value: 6 }]);
    const fresh = lineFromPoints([bucket(5, 4, 1, 5)]);
    assert.deepEqual(keepNewer(fresh, held), {
      steps: [5, 6], values: [4, 6], mins: [1, 6], maxs: [5, 6],
    });
    assert.equal(keepNewer(held, fresh), held);
    assert.deepEqual(keepNewer(emptyLine(), held), held);
  });
});

describe("several lines on one chart", () => {
  test("one line is its own columns", () => {
    const line = lineFromPoints([bucket(1, 1, 0, 2)]);
    const data = alignLines([line]);
    assert.equal(data[0], line.steps);
    assert.equal(data.length, 4);
  });

  test("lines over the union of their steps, null where a line has none", () => {
    const a = lineFromPoints([bucket(1, 1, 0, 2), bucket(3, 3, 2, 4)]);
    const b = lineFromPoints([{ step: 2, value: 20 }, { step: 3, value: 30 }]);
    assert.deepEqual(alignLines([a, b]), [
      [1, 2, 3],
      [1, null, 3], [0, null, 2], [2, null, 4],
      [null, 20, 30], [null, 20, 30], [null, 20, 30],
    ]);
  });
});

describe("how many points to ask for", () => {
  test("one per pixel, within 100..2000", () => {
    assert.equal(maxPointsFor(590.4), 590);
    assert.equal(maxPointsFor(20), 100);
    assert.equal(maxPointsFor(5000), 2000);
    assert.equal(maxPointsFor(undefined), 100);
  });

  test("the first grid track", () => {
    assert.equal(firstTrackWidth("590.5px 590.5px"), 590.5);
    assert.equal(firstTrackWidth("none"), null);
    assert.equal(firstTrackWidth(undefined), null);
  });

  test("the URL gets max_points, and stays relative", () => {
    assert.equal(withMaxPoints("/api/v1/jobs/7/metrics/", 600, "http://h/jobs/7/"), "/api/v1/jobs/7/metrics/?max_points=600");
    assert.equal(
      withMaxPoints("/api/v1/jobs/7/metrics/?name=loss&max_points=5", 300, "http://h/"),
      "/api/v1/jobs/7/metrics/?name=loss&max_points=300",
    );
    assert.equal(withMaxPoints("http://other/m/", 100, "http://h/"), "http://other/m/?max_points=100");
  });
});

test("loadMetrics asks for the charts' width and sets each series under its key", async () => {
  const calls = [];
  const charts = { maxPoints: () => 640, setSeries: (...args) => calls.push(args) };
  const saved = globalThis.fetch;
  let asked;
  globalThis.fetch = async (url) => {
    asked = url;
    return { ok: true, json: async () => ({ downsampled: true, series: { loss: [bucket(9, 1, 0, 2)] } }) };
  };
  try {
    await loadMetrics(charts, "/api/v1/jobs/3/metrics/", { key: 3, label: "job three" });
    await loadMetrics(charts, "/api/v1/jobs/3/metrics/");
  } finally {
    globalThis.fetch = saved;
  }
  assert.match(asked, /\/api\/v1\/jobs\/3\/metrics\/\?max_points=640$/);
  assert.deepEqual(calls[0], ["loss", [bucket(9, 1, 0, 2)], { key: 3, label: "job three" }]);
  assert.deepEqual(calls[1], ["loss", [bucket(9, 1, 0, 2)], { key: undefined, label: undefined }]);
});

test("loadMetrics throws on an HTTP error", async () => {
  const saved = globalThis.fetch;
  globalThis.fetch = async () => ({ ok: false, status: 500 });
  try {
    await assert.rejects(loadMetrics({ maxPoints: () => 100 }, "/m/"), /HTTP 500/);
  } finally {
    globalThis.fetch = saved;
  }
});

describe("line colours", async () => {
  const { COLORS, colorOfName, colorOfRun } = await import("../src/lib/colors.js");

  test("a metric's colour follows its name, not the order charts were drawn in", () => {
    assert.equal(colorOfName("test_rmse"), colorOfName("test_rmse"));
    assert.ok(COLORS.includes(colorOfName("train_loss")));
    const names = ["train_loss", "test_rmse", "auc", "epoch", "examples_per_sec"];
    const once = names.map(colorOfName);
    const reversed = [...names].reverse().map(colorOfName).reverse();
    assert.deepEqual(once, reversed);
    assert.ok(new Set(once).size > 1, "every metric got one colour");
  });

  test("a run's colour is its place among the compared runs", () => {
    assert.deepEqual([0, 1, 2].map(colorOfRun), COLORS.slice(0, 3));
    assert.equal(colorOfRun(COLORS.length), COLORS[0]);
  });
});
