import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { formatSize, uploadOutcome } from "../src/pages/submit/code.js";

describe("formatSize", () => {
  test("bytes, then KiB and MiB with one decimal below 10", () => {
    assert.equal(formatSize(0), "0 B");
    assert.equal(formatSize(812), "812 B");
    assert.equal(formatSize(3500), "3.4 KiB");
    assert.equal(formatSize(20 * 1024), "20 KiB");
    assert.equal(formatSize(12 * 1024 * 1024), "12 MiB");
  });
});

describe("uploadOutcome", () => {
  test("a kept archive gives its digest and size", () => {
    const digest = `sha256:${"a".repeat(64)}`;
    assert.deepEqual(uploadOutcome(201, { digest, size: 42 }), { digest, size: 42 });
  });

  test("a refusal gives the server's words", () => {
    const error = "Refused: member '../x' leaves the archive.";
    assert.deepEqual(uploadOutcome(400, { error }), { error });
    assert.deepEqual(uploadOutcome(413, { error: "The archive is larger than 1 MiB." }), {
      error: "The archive is larger than 1 MiB.",
    });
  });

  test("an answer without words (a proxy's page) still says what happened", () => {
    assert.match(uploadOutcome(413, null).error, /too large/);
    assert.match(uploadOutcome(502, null).error, /HTTP 502/);
    assert.match(uploadOutcome(201, { size: 1 }).error, /HTTP 201/);
  });
});
