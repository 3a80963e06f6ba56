"""The failure-cause table (`jobs.causes`): each cause from the facts the platform records
about a task's end, with real Python tracebacks as the task's stderr."""

from __future__ import annotations

import pytest
from trainhub.jobs.causes import CAUSES, EndCause, EndFacts, classify, with_cause
from trainhub.jobs.tracebacks import last_error

from ps_runtime.taskenv import EXIT_ENVIRONMENT, EXIT_PS_LOST

# What `python train.py` printed (CPython 3.11), line by line as the log stores it.
MISSING_MODULE = """\
Traceback (most recent call last):
  File "/var/lib/trainhub/tasks/7/code/train.py", line 6, in <module>
    main()
  File "/var/lib/trainhub/tasks/7/code/train.py", line 12, in main
    import foo
ModuleNotFoundError: No module named 'foo'""".splitlines()

# The error arose in the standard library, called from the user's line 3.
JSON_ERROR = """\
epoch 1 loss 0.93
Traceback (most recent call last):
  File "/work/job/t2.py", line 4, in <module>
    main()
  File "/work/job/t2.py", line 3, in main
    json.loads("{bad")
  File "/usr/lib/python3.11/json/__init__.py", line 346, in loads
    return _default_decoder.decode(s)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/json/decoder.py", line 353, in raw_decode
    obj, end = self.scan_once(s, idx)
               ^^^^^^^^^^^^^^^^^^^^^^
json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)""".splitlines()  # noqa: E501

# A call to a parameter server that was gone (grpcio 1.x).
GRPC_UNAVAILABLE = """\
Traceback (most recent call last):
  File "/work/job/g.py", line 5, in pull
    return call(b"", timeout=2)
           ^^^^^^^^^^^^^^^^^^^^
  File "/opt/venv/lib/python3.11/site-packages/grpc/_channel.py", line 999, in _end_unary_response_blocking
    raise _InactiveRpcError(state)  # pytype: disable=not-instantiable
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:
\tstatus = StatusCode.UNAVAILABLE
\tdetails = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1"
>""".splitlines()  # noqa: E501

# An exception raised while handling another: the last one ended the process; its last
# user frame is under the runtime's own frames.
CHAINED = """\
Traceback (most recent call last):
  File "/work/job/train.py", line 20, in step
    x = batch["x"]
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/work/job/train.py", line 31, in main
    step(batch)
  File "/opt/venv/lib/python3.11/site-packages/ps_runtime/coordinator/closures.py", line 88, in run
    raise RuntimeError("closure failed")
RuntimeError: closure failed""".splitlines()


def _failed(exit_code: int | None = 1, **facts: object) -> EndCause:
    return classify(EndFacts(state="failed", exit_code=exit_code, **facts))  # type: ignore[arg-type]


def test_a_missing_module_names_it_where_it_was_imported_and_what_to_add() -> None:
    end = _failed(1, stderr=MISSING_MODULE)
    assert end == EndCause(
        "user_exception",
        "ModuleNotFoundError: No module named 'foo' at train.py:12 — add foo to "
        "environment.requirements",
        "ModuleNotFoundError at train.py:12",  # its signature (`jobs.retries`)
    )


def test_an_exception_in_a_library_names_the_last_frame_of_user_code() -> None:
    end = _failed(1, stderr=JSON_ERROR)
    assert end.cause == "user_exception"
    assert end.hint.startswith(
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes"
    )
    assert " at t2.py:3 — fix the code there" in end.hint


def test_of_chained_exceptions_the_last_one_counts_and_runtime_frames_are_not_user_code() -> None:
    error = last_error(CHAINED)
    assert error is not None
    assert (error.type, error.message) == ("RuntimeError", "closure failed")
    assert error.user_frame is not None and error.user_frame.where == "train.py:31"
    assert len(error.frames) == 2


def test_no_traceback_or_a_cut_one_is_none() -> None:
    assert last_error(["loss 0.3", "done"]) is None
    assert last_error([*MISSING_MODULE[:3], "[worker-0] another line"]) is None


def test_a_grpc_peer_unavailable_is_transient_network_not_the_users_bug() -> None:
    end = _failed(1, stderr=GRPC_UNAVAILABLE)
    assert end.cause == "transient_network"
    assert "StatusCode.UNAVAILABLE" in end.hint
    deadline = [line.replace("UNAVAILABLE", "DEADLINE_EXCEEDED") for line in GRPC_UNAVAILABLE]
    assert _failed(1, stderr=deadline).cause == "transient_network"


def test_the_oom_killer_says_how_much_memory_and_what_to_raise() -> None:
    end = _failed(137, oom_killed=True, memory_mb=1024, role="worker")
    assert end == EndCause(
        "out_of_memory", "the task used more than its 1024 MiB: raise workers.resources.memory_mb"
    )
    ps = _failed(137, oom_killed=True, memory_mb=2048, role="ps")
    assert ps.hint.endswith("raise parameter_servers.resources.memory_mb")


def test_a_sigkill_from_outside_is_killed_and_mentions_memory() -> None:
    end = _failed(137, memory_mb=512, role="coordinator")
    assert end.cause == "killed"
    assert "SIGKILL" in end.hint and "512 MiB" in end.hint
    assert "coordinator.resources.memory_mb" in end.hint
    term = _failed(143)
    assert term.cause == "killed" and "SIGTERM" in term.hint and "memory" not in term.hint
    assert _failed(-9).cause == "killed"  # a raw wait status


def test_a_lost_node_or_no_exit_status_is_node_lost() -> None:
    end = _failed(None, node_lost=True, node="gpu-3")
    assert end.cause == "node_lost" and "node gpu-3 stopped answering" in end.hint
    assert _failed(None).cause == "node_lost"  # the agent saw nothing: lost while it was down
    # A task being stopped when its node was lost ended with the node, not as asked.
    lost = EndFacts(state="stopped", exit_code=None, asked_to_stop=True, node_lost=True)
    assert classify(lost).cause == "node_lost"


def test_a_preempted_task_is_preempted_whatever_it_exited_with() -> None:
    assert _failed(143, preempted=True, asked_to_stop=True).cause == "preempted"
    stopped = classify(EndFacts(state="stopped", exit_code=0, asked_to_stop=True))
    assert stopped == EndCause("stopped", "")


def test_environment_ps_lost_disk_full_and_a_plain_exit_code() -> None:
    assert _failed(EXIT_ENVIRONMENT).cause == "environment_failed"
    assert "environment.requirements" in _failed(EXIT_ENVIRONMENT).hint
    assert _failed(EXIT_PS_LOST).cause == "ps_lost"
    assert "parameter_servers.replication to 1" in _failed(EXIT_PS_LOST).hint
    full = "exited with code 1; its scratch space (512 MiB: …) was full"
    assert _failed(1, message=full).cause == "disk_full"
    assert _failed(1, stderr=["OSError: [Errno 28] No space left on device"]).cause == "disk_full"
    plain = _failed(3, stderr=["loading", "bad config: lr must be > 0", ""])
    assert plain.cause == "exit_code"
    assert "exited with code 3" in plain.hint and "bad config: lr must be > 0" in plain.hint


def test_success_has_no_hint() -> None:
    assert classify(EndFacts(state="succeeded", exit_code=0)) == EndCause("succeeded", "")


def test_every_cause_id_is_unique_and_the_job_text_carries_cause_and_hint() -> None:
    ids = [cause.id for cause in CAUSES]
    assert len(ids) == len(set(ids))
    assert {"user_exception", "out_of_memory", "killed", "node_lost", "preempted"} <= set(ids)
    assert with_cause("worker 0 exited with code 1", EndCause("exit_code", "do X")) == (
        "worker 0 exited with code 1 — exit_code: do X"
    )
    assert with_cause("w", EndCause("stopped", "")) == "w — stopped"
    assert with_cause("w", EndCause("", "")) == "w"


@pytest.mark.parametrize("cause", [c.id for c in CAUSES])
def test_each_cause_is_documented_in_the_design(cause: str) -> None:
    from pathlib import Path

    design = (Path(__file__).parents[3] / "docs" / "design.md").read_text()
    assert f"`{cause}`" in design.split("## Failure causes", 1)[-1]
