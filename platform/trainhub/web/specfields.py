"""The submit form's fields: one per spec field, named by its path (`workers.min`), in
the sections the page shows them in, with the widget each gets (`trainhub.web.forms`
turns what they hold into the spec document)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django import forms

from ps_runtime.agent.envspec import DEFAULT_TIMEOUT_SECONDS
from trainhub.jobs.choices import Priority
from trainhub.jobs.jobspec import RETRY_CAUSES
from trainhub.jobs.stalls import OnStall

# The form's file input for a code archive; what it uploads fills the spec's `code`.
CODE_FILE = "code_file"
REQUIREMENTS = "environment.requirements"


@dataclass(frozen=True)
class SpecField:
    path: str  # the field's path in the spec document, also the input's name
    label: str
    # "text" | "int" | "float" | "team" | "priority" | "args" | "lines" | "causes"
    # (a comma-separated list) | "on_stall"
    kind: str
    help: str = ""
    placeholder: str = ""


@dataclass(frozen=True)
class Section:
    legend: str
    fields: tuple[SpecField, ...]
    uploads: tuple[str, ...] = ()  # form fields that are not spec fields, shown first


SECTIONS = (
    Section(
        "Job",
        (
            SpecField("name", "Name", "text", "Letters, digits, '.', '_' or '-'."),
            SpecField("team", "Team", "team"),
            SpecField("priority", "Priority", "priority"),
            SpecField("entrypoint", "Entrypoint", "text", "module:function the coordinator runs."),
            SpecField("args", "Arguments (JSON or YAML)", "args", "Passed to the entrypoint."),
        ),
    ),
    Section(
        "Code",
        (
            SpecField(
                "code",
                "Code digest",
                "text",
                "Filled in by the upload above, or paste the digest of an earlier upload; "
                "blank: the entrypoint is installed on the nodes.",
                placeholder="sha256:…",
            ),
        ),
        uploads=(CODE_FILE,),
    ),
    Section(
        "Environment",
        (
            SpecField(
                REQUIREMENTS,
                "Requirements",
                "lines",
                "One pip requirement per line, like torch>=2.3; no options, URLs or paths "
                "(the nodes' package index settings apply). Blank: the runtime's packages only.",
                placeholder="torch>=2.3\npandas==2.2.*",
            ),
            SpecField(
                "environment.python",
                "Python version",
                "text",
                "Like 3.11; blank: the nodes' own.",
                placeholder="3.11",
            ),
            SpecField(
                "environment.timeout_seconds",
                "Build timeout (s)",
                "int",
                f"How long a node may take to build it; blank: {DEFAULT_TIMEOUT_SECONDS:g}.",
                placeholder=f"{DEFAULT_TIMEOUT_SECONDS:g}",
            ),
        ),
    ),
    Section(
        "Parameter servers",
        (
            SpecField("parameter_servers.replicas", "PS replicas", "int"),
            SpecField("parameter_servers.resources.cpu", "CPU per PS", "float"),
            SpecField("parameter_servers.resources.memory_mb", "Memory per PS (MiB)", "int"),
            SpecField(
                "parameter_servers.replication",
                "Backups per shard",
                "int",
                "0-2, fewer than PS replicas: a lost PS is replaced while the job runs on.",
            ),
        ),
    ),
    Section(
        "Workers",
        (
            SpecField("workers.min", "Workers (min)", "int", "Start with this many."),
            SpecField("workers.max", "Workers (max)", "int", "Grow up to this many."),
            SpecField("workers.resources.cpu", "CPU per worker", "float"),
            SpecField("workers.resources.memory_mb", "Memory per worker (MiB)", "int"),
            SpecField("workers.resources.gpu", "GPUs per worker", "int"),
        ),
    ),
    Section(
        "Coordinator",
        (
            SpecField("coordinator.resources.cpu", "Coordinator CPU", "float"),
            SpecField("coordinator.resources.memory_mb", "Coordinator memory (MiB)", "int"),
        ),
    ),
    Section(
        "Lifecycle",
        (
            SpecField("freeze_seconds", "Freeze window (s)", "int", "No rescaling this soon."),
            SpecField("checkpoint_every_seconds", "Checkpoint every (s)", "int"),
            SpecField(
                "max_restarts",
                "Max restarts",
                "int",
                "Restarts after the job's own errors (the same error twice in a row fails it).",
            ),
        ),
    ),
    Section(
        "Restarts and stalls",
        (
            SpecField(
                "retry.on",
                "Causes that restart outside Max restarts",
                "causes",
                "Comma-separated, of " + ", ".join(RETRY_CAUSES) + "; blank: the default "
                "(an empty list only in the YAML tab, as on: []).",
            ),
            SpecField("retry.max", "Restarts for those causes (max)", "int"),
            SpecField(
                "retry.backoff_seconds",
                "First wait before a restart (s)",
                "float",
                "Each next restart waits twice as long, up to retry.max_backoff_seconds.",
            ),
            SpecField(
                "stall.on_stall",
                "When it stalls",
                "on_stall",
                "No progress for longer than its usual step time allows: its stacks are "
                "taken, then after the grace it restarts from its checkpoint, stops or "
                "only notifies.",
            ),
            SpecField("stall.grace_seconds", "Grace after a stall (s)", "float"),
        ),
    ),
)
FIELDS = {f.path: f for section in SECTIONS for f in section.fields}


def widget_for(field: SpecField, teams: Sequence[tuple[str, str]]) -> forms.Widget:
    if field.kind == "team":
        return forms.Select(choices=teams)
    if field.kind == "priority":
        return forms.Select(choices=Priority.choices)
    if field.kind == "on_stall":
        return forms.Select(choices=[("", "(default: restart)")] + [(o, o) for o in OnStall])
    placeholder = {"placeholder": field.placeholder} if field.placeholder else {}
    if field.kind in ("args", "lines"):
        attrs = {"rows": 3, "spellcheck": "false", "class": "code", **placeholder}
        return forms.Textarea(attrs=attrs)
    if field.kind in ("int", "float"):
        step = "1" if field.kind == "int" else "any"
        return forms.NumberInput(attrs={"step": step, "inputmode": "decimal", **placeholder})
    attrs = {"autocomplete": "off", "spellcheck": "false", **placeholder}
    if field.path == "entrypoint":
        attrs["list"] = "entrypoint-examples"
    return forms.TextInput(attrs=attrs)
