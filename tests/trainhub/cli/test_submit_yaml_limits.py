"""`trainhub submit` reads its spec file as the submit page does: no YAML anchors or
aliases, at most 64 KiB. A refused file is named, exits 2 and sends nothing (no server is
signed in to here: a client that got as far as sending would fail otherwise)."""

from __future__ import annotations

from pathlib import Path

from trainhub.jobs.specyaml import MAX_SPEC_BYTES

from .helpers import trainhub

SPEC = "name: small\nteam: recsys\nentrypoint: ps_runtime.examples.movielens:train\n"
LAUGHS = SPEC + (
    "args:\n"
    "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    "  l1: &l1 [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0]\n"
    "  l2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]\n"
    "  l3: &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]\n"
    "  l4: &l4 [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3]\n"
    "  l5: &l5 [*l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4]\n"
    "  l6: &l6 [*l5, *l5, *l5, *l5, *l5, *l5, *l5, *l5, *l5]\n"
    "  l7: &l7 [*l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6]\n"
    "  l8: [*l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7]\n"
)


def test_an_alias_bomb_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(LAUGHS)
    done = trainhub(tmp_path / "no-login.json", "submit", str(spec), timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(
        f"{spec}: YAML anchors and aliases (&name, *name) are not allowed "
        "(line 5, column 7): write each value out in full."
    )


def test_a_spec_file_over_64_kib_is_refused_with_the_limit_named(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC + "# " + "x" * MAX_SPEC_BYTES + "\n")
    done = trainhub(tmp_path / "no-login.json", "submit", str(spec), timeout=30)
    assert done.returncode == 2, done.stderr
    assert f"{spec}: Longer than 64 KiB (65536 bytes), the most a job spec may be." in (done.stderr)
