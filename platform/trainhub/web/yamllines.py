"""Where in the submitted YAML each spec error is: its line (and column), so the submit
page can list "line 12" beside the error and mark that line in the editor.

A field error's path (`workers.max`, `parameter_servers.resources.cpu`, an unknown field
`foo`, `environment.requirements.0`) is walked through the composed YAML's mappings and
sequences to the entry it names; a path that is not in the text (a required field left
out) falls back to the nearest parent that is, or to line 1. An error about the text
itself (`spec`: not YAML, an anchor) is where PyYAML's mark says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from trainhub.jobs.specyaml import MAX_SPEC_BYTES

DOCUMENT = "spec"  # the path of an error about the YAML text as a whole
# How `trainhub.jobs.specyaml` says where a refused construct is ("(line 3, column 5)").
_WHERE = re.compile(r"\(line (\d+), column (\d+)\)")


@dataclass(frozen=True)
class YamlError:
    """One error of the YAML tab, where it is (1-based)."""

    path: str
    message: str
    line: int
    column: int = 1

    def as_mark(self) -> dict[str, object]:
        """What the page's editor reads to mark it (`json_script`)."""
        return {
            "path": self.path,
            "message": self.message,
            "line": self.line,
            "column": self.column,
        }


def locate_errors(text: str, errors: list[tuple[str, str]]) -> list[YamlError]:
    """`errors` ((path, message) pairs, as the YAML tab shows them) with their places in
    `text`, the YAML they are about."""
    root = _compose(text)
    located = []
    for path, message in errors:
        if path == DOCUMENT:
            line, column = _document_place(text, root, message)
        else:
            line, column = _place(root, path.split(".") if path else [])
        located.append(YamlError(path, message, line, column))
    return located


def _compose(text: str) -> yaml.Node | Exception | None:
    """The YAML's node tree, or why there is none (a `MarkedYAMLError` knows where)."""
    if len(text.encode("utf-8", "replace")) > MAX_SPEC_BYTES:
        return None  # refused for its size before it was read: nowhere in particular
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        return exc
    except RecursionError:  # nested past Python's limit: refused for that, not placed
        return None


def _document_place(text: str, root: yaml.Node | Exception | None, message: str) -> tuple[int, int]:
    mark = getattr(root, "problem_mark", None) if isinstance(root, Exception) else None
    if mark is not None:
        return _clamped(text, mark.line + 1, mark.column + 1)
    where = _WHERE.search(message)  # valid YAML a spec may not use (anchors, depth)
    if where:
        return int(where.group(1)), int(where.group(2))
    return _place(root, [DOCUMENT])  # a field named `spec`, or the document


def _clamped(text: str, line: int, column: int) -> tuple[int, int]:
    # PyYAML marks an unexpected end of the text past its last line.
    lines = text.split("\n")
    if line > len(lines):
        return max(len(lines), 1), len(lines[-1]) + 1 if lines else 1
    return line, column


def _place(root: yaml.Node | Exception | None, keys: list[str]) -> tuple[int, int]:
    """The line and column of the entry `keys` names, or of its nearest parent there."""
    if not isinstance(root, yaml.Node):
        return 1, 1
    node: yaml.Node = root
    place = (node.start_mark.line + 1, node.start_mark.column + 1)
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            entry = _entry(node, key)
            if entry is None:
                break
            place = (entry[0].start_mark.line + 1, entry[0].start_mark.column + 1)
            node = entry[1]
        elif isinstance(node, yaml.SequenceNode) and key.isdigit() and int(key) < len(node.value):
            node = node.value[int(key)]
            place = (node.start_mark.line + 1, node.start_mark.column + 1)
        else:
            break
    return place


def _entry(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The (key, value) nodes of `key` in `mapping` (the last, as the loader keeps it)."""
    found = None
    for key_node, value_node in mapping.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            found = (key_node, value_node)
    return found
