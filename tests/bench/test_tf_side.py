"""bench/tf_side.py, the TensorFlow side the comparing benches share: reading TF's JSON
line, the order ours, TF, ours, TF, the medians and the ratio, the errors that say what to
do. TensorFlow is not needed: a small script in tmp_path plays TF's interpreter (it
answers the version probe and prints a result line as the baseline's bench.py does)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import tf_side  # noqa: E402


def _load(name: str) -> ModuleType:
    """A bench script as a module of its own name (its main() does not run)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_tf(tmp_path: Path, report: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """An executable standing in for TF's interpreter, and the file where it writes the
    command line it was given. It prints TF-like noise and then one JSON line: the
    options it got (as bench.py's result echoes its settings), overridden by `report`."""
    argv_file = tmp_path / "argv.json"
    script = tmp_path / "tfpython"
    script.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import json, sys
            if sys.argv[1] == "-c":
                print("2.21.0")
                sys.exit(0)
            open({str(argv_file)!r}, "w").write(json.dumps(sys.argv[1:]))
            bench, workload, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
            options = {{}}
            for key, value in zip(rest[::2], rest[1::2]):
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
                options[key[2:].replace("-", "_")] = value
            print("W tensorflow: noise on stdout", flush=True)
            print("some TF log", file=sys.stderr)
            print(json.dumps({{"workload": workload, **options, "examples_per_sec": 1.5,
                              **{json.dumps(report or {})}}}))
            """
        )
    )
    script.chmod(0o755)
    bench = tmp_path / "tf_ps" / "bench.py"
    bench.parent.mkdir()
    bench.write_text("# the baseline script; the fake interpreter never reads it\n")
    return script, bench


def test_parse_tf_line_takes_the_last_result_line_of_the_workload() -> None:
    stdout = "\n".join(
        [
            "2026-11-29 I tensorflow: starting",
            json.dumps({"workload": "embed", "examples_per_sec": 1}),
            "{not json",
            json.dumps({"workload": "embed", "examples_per_sec": 2}),
            json.dumps({"workload": "mf", "examples_per_sec": 3}),
            "[1, 2]",
            "done",
        ]
    )
    assert tf_side.parse_tf_line(stdout, "embed")["examples_per_sec"] == 2
    assert tf_side.parse_tf_line(stdout, "mf")["examples_per_sec"] == 3
    with pytest.raises(SystemExit, match="TensorFlow's dense printed no result line"):
        tf_side.parse_tf_line(stdout, "dense")


def test_alternate_runs_ours_then_tf_in_every_pair() -> None:
    calls: list[str] = []
    told: list[int] = []

    def ours(i: int) -> dict[str, Any]:
        calls.append(f"ours {i}")
        return {"examples_per_sec": 10 + i}

    def tf(i: int) -> dict[str, Any]:
        calls.append(f"tf {i}")
        return {"examples_per_sec": 20 + i}

    pairs = tf_side.alternate(3, ours, tf, lambda pair: told.append(pair["run"]))
    assert calls == ["ours 0", "tf 0", "ours 1", "tf 1", "ours 2", "tf 2"]
    assert told == [1, 2, 3]  # each pair reported as soon as it is done
    assert [
        (p["run"], p["ours"]["examples_per_sec"], p["tf"]["examples_per_sec"]) for p in pairs
    ] == [
        (1, 10, 20),
        (2, 11, 21),
        (3, 12, 22),
    ]
    assert all(len(p["load_avg"]) == 3 for p in pairs)

    calls.clear()
    alone = tf_side.alternate(2, ours, None)
    assert calls == ["ours 0", "ours 1"]
    assert all("tf" not in p for p in alone)


def test_side_by_side_prints_every_run_both_medians_and_ours_over_tf() -> None:
    pairs = [
        {"ours": {"examples_per_sec": o}, "tf": {"examples_per_sec": t}}
        for o, t in ((300, 100), (100, 400), (200, 200))
    ]
    out = tf_side.side_by_side(pairs, "examples_per_sec")
    assert out == {
        "ours_examples_per_sec_median": 200,
        "ours_examples_per_sec_runs": [300, 100, 200],
        "tf_examples_per_sec_median": 200,
        "tf_examples_per_sec_runs": [100, 400, 200],
    }
    assert tf_side.ratio(out, "examples_per_sec") == 1.0
    skewed = tf_side.side_by_side(
        [{"ours": {"x": 3.0}, "tf": {"x": 2.0}}, {"ours": {"x": 5.0}, "tf": {"x": 2.0}}], "x"
    )
    assert tf_side.ratio(skewed, "x") == 2.0  # ours / TF, of the medians

    alone = tf_side.side_by_side([{"ours": {"x": 1.0}}], "x")
    assert alone == {"ours_x_median": 1.0, "ours_x_runs": [1.0]}
    assert tf_side.ratio(alone, "x") is None


def test_run_tf_passes_every_option_and_reads_its_line(tmp_path: Path) -> None:
    python, bench = _fake_tf(tmp_path)
    assert tf_side.need_tf(str(python), bench) == str(python)
    options = {"num_ps": 2, "num_workers": 2, "steps": 200, "warmup_steps": 10, "lr": 0.1}
    result = tf_side.run_tf(str(python), bench, "embed", options)
    assert result["examples_per_sec"] == 1.5
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == [
        str(bench),
        "embed",
        *["--num-ps", "2", "--num-workers", "2", "--steps", "200"],
        *["--warmup-steps", "10", "--lr", "0.1"],
    ]


def test_run_tf_stops_when_tf_ran_other_settings(tmp_path: Path) -> None:
    python, bench = _fake_tf(tmp_path, report={"steps": 100})
    with pytest.raises(SystemExit, match=r"ran other settings \(steps: asked 200, ran 100\)"):
        tf_side.run_tf(str(python), bench, "embed", {"steps": 200, "num_ps": 1})


def _bench(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_PYTHON"}
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / f"{name}.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ratings(tmp_path: Path) -> Path:
    """A folder that passes the benches' ml-100k check (they stop before reading it)."""
    data = tmp_path / "ml-100k"
    data.mkdir()
    for name in ("u1.base", "u1.test"):
        (data / name).write_text("1\t1\t5\t0\n")
    return data


@pytest.mark.parametrize("name", ["embedding", "movielens", "torch_ps"])
def test_benches_without_tf_python_say_how_to_get_it(name: str, ratings: Path) -> None:
    data = [] if name == "embedding" else ["--data", str(ratings)]
    done = _bench(name, "--runs", "1", *data)
    assert done.returncode != 0
    assert "no TensorFlow interpreter given (--tf-python)" in done.stderr
    assert "python3 -m venv" in done.stderr and "tensorflow-cpu==2.21.0" in done.stderr
    assert "--no-tf runs ours alone" in done.stderr
    assert done.stdout == ""  # stopped before any run


@pytest.mark.parametrize("name", ["embedding", "movielens", "torch_ps"])
def test_benches_with_the_baseline_missing_say_so(name: str, ratings: Path, tmp_path: Path) -> None:
    python, _ = _fake_tf(tmp_path)
    data = [] if name == "embedding" else ["--data", str(ratings)]
    missing = tmp_path / "nowhere" / "bench.py"
    done = _bench(name, "--tf-python", str(python), "--tf-bench", str(missing), *data)
    assert done.returncode != 0
    assert f"the TF baseline script {missing} is missing" in done.stderr
    assert "--no-tf" in done.stderr
    assert done.stdout == ""


def test_embedding_gives_tf_our_cluster_and_workload() -> None:
    embedding = _load("embedding")
    assert embedding.tf_options(2, 3, 150, 7) == {
        "num_ps": 2,
        "num_workers": 3,
        "steps": 150,
        "warmup_steps": 7,
        # the example's own defaults: the baseline's embed workload
        "batch_size": 4096,
        "data_batches": 200,
        "seed": 1234,
        "zipf_a": 1.2,
        "lr": 0.1,
    }


def test_movielens_gives_tf_our_cluster_and_workload(tmp_path: Path) -> None:
    movielens = _load("movielens")
    options = movielens.tf_options(tmp_path, 1, 2)
    assert options == {
        "data": str(tmp_path),
        "num_ps": 1,
        "num_workers": 2,
        "epochs": 20,
        "dim": 32,
        "lr": 0.03,
        "batch_size": 1024,
        "reg": 0.05,
        "reg_bias": 0.05,
        "init_std": 0.01,
        "optimizer": "adagrad",
        "adagrad_init": 1e-6,
    }


def test_torch_ps_gives_tf_every_mf_setting_and_our_cluster(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # bench/torch_ps.py needs the torch extra
    torch_ps = _load("torch_ps")
    figures = {
        "train_examples_per_sec": 78280.4,
        "final_test_rmse": 0.92261,
        "best_test_rmse": 0.92251,
        "epoch1_time_s": 1.5,
        "startup_s": 4.4,
    }
    python, bench = _fake_tf(tmp_path, report=figures)
    result = torch_ps.run_tf_mf(str(python), bench, tmp_path, torch_ps.TF_MF, 1, 2)
    assert result == {
        "examples_per_sec": 78280,
        "test_rmse": 0.9226,
        "best_test_rmse": 0.9225,
        "epoch1_s": 1.5,
        "startup_s": 4.4,
    }
    argv = json.loads((tmp_path / "argv.json").read_text())
    # tensorflow_ps.md's workload A, every setting said, on 1 PS + 2 workers
    assert argv == [
        str(bench),
        "mf",
        *["--data", str(tmp_path), "--num-ps", "1", "--num-workers", "2"],
        *["--epochs", "20", "--dim", "32", "--batch-size", "1024", "--optimizer", "adagrad"],
        *["--lr", "0.03", "--adagrad-init", "1e-06", "--reg", "0.05", "--reg-bias", "0.05"],
        *["--init-std", "0.01"],
    ]
