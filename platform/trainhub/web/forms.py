"""The submit page's two editors over one job spec: a form (one input per spec field,
named by its path, e.g. `workers.min`) and the YAML document the CLI takes.

Neither validates the spec: each turns what was typed into the spec document, and
`trainhub.jobs.spec.parse_job_spec` (the API's validation) judges it; its errors, which
name a field path, are put back beside that field (`add_spec_errors`). The form also
takes a code archive to upload (`CODE_FILE`, not a spec field: its digest fills `code`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import yaml
from django import forms
from rest_framework.exceptions import ErrorDetail

from ps_runtime.agent.envspec import requirements_from_text
from trainhub.jobs.capacity import sized_to_fit
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.specyaml import SpecYamlError, load_spec_yaml

from .specfields import CODE_FILE, FIELDS, REQUIREMENTS, SECTIONS, SpecField, widget_for

# The built-in examples offered for the entrypoint (each a `module:function` that trains).
EXAMPLE_ENTRYPOINTS = (
    "ps_runtime.examples.movielens:train",
    "ps_runtime.examples.ctr:train",
)
DEFAULT_ARGS: dict[str, Any] = {"epochs": 5}
DEFAULT_NAME = "movielens-mf"  # the first example's: a new submission runs as it is
# The spec validator's words for one bad line (trainhub.jobs.specenv), renumbered to the
# textarea's lines when blank or comment lines were left out.
_REQUIREMENT_LINE = re.compile(r"^requirements line (\d+) ")


class SpecDocumentError(ValueError):
    """What was typed is not a spec document at all (bad YAML, args not a mapping)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class JobSpecForm(forms.Form):
    """The form tab. Every field is text here (the spec validator parses numbers, so its
    messages are the only ones); `teams` are the (slug, label) choices the user may use."""

    def __init__(self, *args: Any, teams: Sequence[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in FIELDS.values():
            self.fields[field.path] = forms.CharField(
                label=field.label,
                required=False,
                strip=field.kind != "args",
                help_text=field.help,
                widget=widget_for(field, teams),
            )
        self.fields[CODE_FILE] = forms.FileField(
            label="Code archive (.tar.gz or .zip)",
            required=False,
            help_text="Uploaded as soon as you choose it (as POST /api/v1/code/ takes it); a "
            "requirements.txt at its top joins the requirements below.",
            widget=forms.FileInput(attrs={"accept": ".tar.gz,.tgz,.zip"}),
        )
        # The textarea's line number of each requirement `document()` kept.
        self.requirement_lines: list[int] = []

    def sections(self) -> list[tuple[str, list[forms.BoundField]]]:
        return [
            (s.legend, [self[name] for name in s.uploads] + [self[f.path] for f in s.fields])
            for s in SECTIONS
        ]

    def document(self) -> dict[str, Any]:
        """The spec document typed into the form (blank fields left out: their defaults).

        Raises:
            SpecDocumentError: the arguments are not a JSON or YAML mapping.
        """
        self.is_valid()  # fields with errors (NUL characters) are left out
        values = self.cleaned_data
        document: dict[str, Any] = {}
        for path, field in FIELDS.items():
            raw = values.get(path, "")
            if raw == "" or raw is None:
                continue
            if field.kind == "lines":
                raw = self._requirements(raw)
                if not raw:
                    continue
            _put(document, path, _value(field, raw))
        return document

    def _requirements(self, text: str) -> list[str]:
        """The requirement lines typed, read as a requirements.txt is (comments and blank
        lines left out), remembering where each was."""
        kept: list[str] = []
        self.requirement_lines = []
        for number, line in enumerate(text.splitlines(), start=1):
            for requirement in requirements_from_text(line):
                kept.append(requirement)
                self.requirement_lines.append(number)
        return kept

    def textarea_line(self, index: int) -> int:
        """The textarea's line number of the requirement at `index` (0-based)."""
        if 0 <= index < len(self.requirement_lines):
            return self.requirement_lines[index]
        return index + 1

    @staticmethod
    def initial_for(document: Mapping[str, Any]) -> dict[str, str]:
        """Form values showing `document` (a spec document, e.g. a cloned job's)."""
        initial: dict[str, str] = {}
        for path, field in FIELDS.items():
            value = _get(document, path)
            if value is None:
                continue
            if field.kind == "args":
                initial[path] = _dump(value, flow=True).strip() if value else ""
            elif field.kind == "lines" and isinstance(value, list):
                initial[path] = "\n".join(str(line) for line in value)
            elif field.kind == "causes" and isinstance(value, list):
                initial[path] = ", ".join(str(cause) for cause in value)
            else:
                initial[path] = str(value)
        return initial


class YamlSpecForm(forms.Form):
    """The YAML tab: the whole spec as one document, exactly as `trainhub submit` reads it."""

    spec = forms.CharField(
        label="Job spec (YAML)",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 22, "spellcheck": "false", "class": "code"}),
    )

    def document(self) -> Any:
        """The parsed YAML (validated later, as any spec document).

        Raises:
            SpecDocumentError: the text is not YAML, or not a mapping.
        """
        self.is_valid()
        text = self.cleaned_data.get("spec", "")
        return parse_yaml(text, path="spec")


def parse_yaml(text: str, *, path: str) -> Any:
    """`text` as YAML (JSON is YAML too), as `trainhub submit` reads it: bounded, with no
    anchors or aliases (`trainhub.jobs.specyaml`); `path` names the field in the error."""
    try:
        document = load_spec_yaml(text)
    except SpecYamlError as exc:
        raise SpecDocumentError(path, exc.message) from exc
    if path == "spec" and not isinstance(document, dict):
        raise SpecDocumentError(
            path, "Expected a mapping of spec fields (name, team, entrypoint, …)."
        )
    return document


def dump_yaml(document: Mapping[str, Any]) -> str:
    """A spec document as YAML, in the field order of the docs."""
    return _dump(dict(document), flow=False)


def default_document(team: str = "") -> dict[str, Any]:
    """What a new submission starts from: an example job (name, entrypoint, arguments) and
    the spec's defaults, made smaller where they would not fit the cluster or the team
    (`sized_to_fit`): submitted unedited, it runs."""
    example = EXAMPLE_ENTRYPOINTS[0]
    spec = JobSpec(name=DEFAULT_NAME, team=team, entrypoint=example, args=DEFAULT_ARGS)
    return sized_to_fit(spec).to_dict()


def spec_errors(detail: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A DRF validation error's detail as (field path, message) pairs, e.g.
    ("workers.max", "max (1) must be at least min (2).")."""
    if isinstance(detail, Mapping):
        pairs: list[tuple[str, str]] = []
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" else f"{prefix}.{key}".lstrip(".")
            pairs += spec_errors(value, name)
        return pairs
    if isinstance(detail, list | tuple):
        return [pair for item in detail for pair in spec_errors(item, prefix)]
    return [(prefix, str(detail) if isinstance(detail, ErrorDetail | str) else repr(detail))]


def add_spec_errors(form: JobSpecForm, errors: Iterable[tuple[str, str]]) -> None:
    """Put each error beside the form field it names; others go on top, with their path.
    A requirement's error names the line of the textarea it is on."""
    for path, message in errors:
        if path == REQUIREMENTS:
            form.add_error(path, _REQUIREMENT_LINE.sub(_renumber(form), message, count=1))
        elif path.startswith(REQUIREMENTS + ".") and path.rsplit(".", 1)[1].isdigit():
            line = form.textarea_line(int(path.rsplit(".", 1)[1]))
            form.add_error(REQUIREMENTS, f"requirements line {line}: {message}")
        elif path in form.fields:
            form.add_error(path, message)
        elif path.rsplit(".", 1)[0] in form.fields and path.rsplit(".", 1)[-1].isdigit():
            form.add_error(path.rsplit(".", 1)[0], message)  # an item of a list (retry.on)
        else:
            form.add_error(None, f"{path}: {message}" if path else message)


def _renumber(form: JobSpecForm) -> Callable[[re.Match[str]], str]:
    def renumbered(match: re.Match[str]) -> str:
        return f"requirements line {form.textarea_line(int(match.group(1)) - 1)} "

    return renumbered


def _value(field: SpecField, raw: str) -> Any:
    if field.kind == "causes":
        return [cause for cause in re.split(r"[\s,]+", raw) if cause]
    if field.kind == "args":
        args = parse_yaml(raw, path="args")
        if args is None:
            return {}
        if not isinstance(args, dict):
            raise SpecDocumentError("args", "Expected a mapping, e.g. {epochs: 5, dim: 32}.")
        return args
    try:
        if field.kind == "int":
            return int(raw)
        if field.kind == "float":
            return float(raw)
    except ValueError:
        return raw  # the validator names it ("A valid integer is required.")
    return raw


def _put(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def _get(document: Mapping[str, Any], path: str) -> Any:
    node: Any = document
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


class _PlainDumper(yaml.SafeDumper):
    """Writes a value that occurs twice out twice: `parse_yaml` refuses aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(value: Any, *, flow: bool) -> str:
    # Collections of scalars inline (`resources: {cpu: 1, memory_mb: 1024}`), as the docs.
    return yaml.dump(
        value,
        Dumper=_PlainDumper,
        sort_keys=False,
        default_flow_style=True if flow else None,
        allow_unicode=True,
    )
