"""Each YAML tab error is placed on the line of the submitted text it is about."""

from __future__ import annotations

import pytest
from trainhub.web.yamllines import locate_errors

TEXT = """\
# a comment line
name: mf
team: recsys
foo: 1
parameter_servers:
  replicas: 1
  resources:
    cpu: 2000
workers: {min: 3, max: 2}
environment:
  requirements:
    - numpy
    - not a requirement!
"""


@pytest.mark.parametrize(
    ("path", "line", "column"),
    [
        ("foo", 4, 1),  # an unknown field: its key
        ("workers.max", 9, 19),  # inside a flow mapping
        ("parameter_servers.resources.cpu", 8, 5),
        ("environment.requirements.1", 13, 7),  # a list item
        ("environment.requirements", 11, 3),
        ("workers.resources.cpu", 9, 1),  # not in the text: its nearest parent that is
        ("entrypoint", 2, 1),  # a required field left out: the document
        ("", 2, 1),  # about the spec as a whole: where it starts
    ],
)
def test_a_path_is_placed_on_its_entry_or_its_nearest_parent(
    path: str, line: int, column: int
) -> None:
    [error] = locate_errors(TEXT, [(path, "wrong")])
    assert (error.path, error.message, error.line, error.column) == (path, "wrong", line, column)


def test_every_error_is_placed_in_order() -> None:
    errors = locate_errors(TEXT, [("workers.max", "a"), ("foo", "b")])
    assert [(e.path, e.line) for e in errors] == [("workers.max", 9), ("foo", 4)]
    assert errors[0].as_mark() == {"path": "workers.max", "message": "a", "line": 9, "column": 19}


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("name: x\nteam: [unclosed\n", 3, 1),  # PyYAML's problem mark
        ("name: x\n  team: y\n", 2, 7),
        ("name: x\nworkers: {min: 1\n", 3, 1),  # the end of the text
        ("name: x\nworkers: {min: 1", 2, 17),
        ("", 1, 1),
    ],
)
def test_a_syntax_error_is_placed_where_pyyaml_found_it(text: str, line: int, column: int) -> None:
    [error] = locate_errors(text, [("spec", "Not valid YAML")])
    assert (error.line, error.column) == (line, column)


def test_a_refused_anchor_is_placed_where_its_message_says() -> None:
    text = "name: x\nargs: &a {k: 1}\n"
    message = "YAML anchors and aliases (&name, *name) are not allowed (line 2, column 7): …"
    [error] = locate_errors(text, [("spec", message)])
    assert (error.line, error.column) == (2, 7)
