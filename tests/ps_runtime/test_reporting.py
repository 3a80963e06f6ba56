"""ps_runtime.report writes one JSON line per call to TRAINHUB_METRICS_FD or stdout."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading

import pytest

import ps_runtime


def test_report_to_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRAINHUB_METRICS_FD", raising=False)
    ps_runtime.report(step=3, loss=0.5)
    line = json.loads(capsys.readouterr().out)
    assert line["step"] == 3 and line["values"] == {"loss": 0.5}
    assert dt.datetime.fromisoformat(line["time"]).utcoffset() == dt.timedelta(0)


def test_report_to_pipe_fd_from_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    read_fd, write_fd = os.pipe()
    monkeypatch.setenv("TRAINHUB_METRICS_FD", str(write_fd))

    def burst(k: int) -> None:
        for i in range(50):
            ps_runtime.report(step=i, worker=k, value=np.float32(i) / 2)

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        lines = [json.loads(line) for line in f]
    assert len(lines) == 200
    assert all(set(x) == {"step", "time", "values"} for x in lines)
    assert lines[0]["values"]["value"] == lines[0]["step"] / 2


def test_report_needs_values() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        ps_runtime.report(step=1)
