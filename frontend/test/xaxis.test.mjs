import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  clockAnchors,
  duration,
  epochAnchors,
  extendClock,
  formatX,
  placeLine,
  placeSteps,
} from "../src/lib/xaxis.js";

const T0 = Date.parse("2026-11-28T10:00:00Z");
const at = (seconds) => new Date(T0 + seconds * 1000).toISOString();

describe("epochs", () => {
  test("an epoch reported at its end: steps between are fractions of an epoch", () => {
    const anchors = epochAnchors({ steps: [100, 200, 300], values: [1, 2, 3] });
    assert.deepEqual(anchors, { steps: [0, 100, 200, 300], xs: [0, 1, 2, 3] });
    assert.deepEqual(placeSteps([0, 50, 150, 300], anchors), [0, 0.5, 1.5, 3]);
  });

  test("an epoch reported at every step: the last step of each value is where it ended", () => {
    const line = { steps: [10, 50, 100, 110, 200, 210], values: [1, 1, 1, 2, 2, 3] };
    assert.deepEqual(epochAnchors(line), { steps: [0, 100, 200, 210], xs: [0, 1, 2, 3] });
  });

  test("an epoch going back (a resumed run reporting again) is skipped", () => {
    const line = { steps: [100, 200, 250, 300], values: [1, 2, 1, 3] };
    assert.deepEqual(epochAnchors(line).xs, [0, 1, 2, 3]);
  });

  test("no epoch line: no anchors, and a line cannot be placed", () => {
    assert.deepEqual(epochAnchors(null), { steps: [], xs: [] });
    assert.equal(placeLine({ steps: [1], values: [1], mins: [1], maxs: [1] }, epochAnchors(null)), null);
  });
});

describe("time", () => {
  test("clock entries become seconds since the first, ascending in both", () => {
    const anchors = clockAnchors([
      { step: 10, time: at(5) },
      { step: 0, time: at(0) },
      { step: 20, time: at(4) }, // back in time: dropped
      { step: 30, time: at(9) },
      { step: "x", time: at(1) },
    ]);
    assert.deepEqual(anchors, { steps: [0, 10, 30], xs: [0, 5, 9] });
  });

  test("steps past the last anchor go on along the last segment", () => {
    const anchors = clockAnchors([
      { step: 0, time: at(0) },
      { step: 10, time: at(20) },
    ]);
    assert.deepEqual(placeSteps([5, 15], anchors), [10, 30]);
  });

  test("live points extend the clock from the same origin", () => {
    const first = clockAnchors([{ step: 0, time: at(0) }]);
    const more = extendClock(first, [{ step: 0, time: at(3) }, { step: 4, time: at(8) }], T0);
    assert.deepEqual(more, { steps: [0, 4], xs: [0, 8] });
    assert.equal(extendClock(more, [], T0), more);
  });

  test("a placed line keeps its values and its band", () => {
    const line = { steps: [0, 10], values: [1, 2], mins: [0, 1], maxs: [2, 3] };
    const placed = placeLine(line, { steps: [0, 10], xs: [0, 60] });
    assert.deepEqual(placed, { steps: [0, 60], values: [1, 2], mins: [0, 1], maxs: [2, 3] });
  });

  test("times read as durations on the axis", () => {
    assert.equal(duration(42.4), "42s");
    assert.equal(duration(750), "12m 30s");
    assert.equal(duration(720), "12m");
    assert.equal(duration(3 * 3600 + 5 * 60), "3h 05m");
    assert.equal(formatX("time", 90, String), "1m 30s");
    assert.equal(formatX("epoch", 1.5, String), "1.5");
  });
});
