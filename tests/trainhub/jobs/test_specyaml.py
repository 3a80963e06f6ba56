"""`load_spec_yaml`: YAML as a spec is written, and nothing a spec has no use for."""

from __future__ import annotations

import pytest
from trainhub.jobs.specyaml import MAX_DEPTH, MAX_SPEC_BYTES, SpecYamlError, load_spec_yaml


def test_a_spec_reads_as_safe_load_reads_it() -> None:
    text = "name: x\nargs: {epochs: 2, layers: [64, 32]}\nworkers: {min: 1}\n"
    assert load_spec_yaml(text) == {
        "name": "x",
        "args": {"epochs": 2, "layers": [64, 32]},
        "workers": {"min": 1},
    }
    assert load_spec_yaml(text.encode("utf-16")) == load_spec_yaml(text)  # as a file holds it
    assert load_spec_yaml('{"name": "x"}') == {"name": "x"}  # JSON is YAML


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: &x 1\nb: 2\n", "line 1, column 4"),  # an anchor alone
        ("a: *x\n", "line 1, column 4"),  # an alias of nothing
        ("a: &x {b: 1}\n<<: *x\n", "line 1, column 4"),  # a merge key
    ],
)
def test_anchors_and_aliases_are_refused_saying_where(text: str, where: str) -> None:
    with pytest.raises(SpecYamlError) as refused:
        load_spec_yaml(text)
    assert refused.value.message == (
        f"YAML anchors and aliases (&name, *name) are not allowed ({where}): "
        "write each value out in full."
    )


def test_the_size_limit_counts_bytes() -> None:
    assert load_spec_yaml("a: " + "é" * ((MAX_SPEC_BYTES - 3) // 2)) is not None
    with pytest.raises(SpecYamlError, match=r"Longer than 64 KiB \(65536 bytes\)"):
        load_spec_yaml("a: " + "é" * (MAX_SPEC_BYTES // 2))


def test_deep_nesting_is_refused_rather_than_overflowing_the_stack() -> None:
    assert load_spec_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(SpecYamlError, match=f"Nested more than {MAX_DEPTH} levels deep"):
        load_spec_yaml("[" * 30_000)


def test_what_is_not_yaml_says_where() -> None:
    with pytest.raises(SpecYamlError, match=r"^Not valid YAML \(line 1, column 16\): expected"):
        load_spec_yaml("name: [unclosed")
