"""The submit page's search section: turn the page's job into an experiment (a
hyperparameter search whose trials are that job with other argument values).

Fields for the search block's main keys — method, metric, goal, max_trials,
max_concurrent, max_budget — and the parameters as YAML. Like the job form it only builds
the document; `trainhub.experiments.spec.parse_experiment` (the API's validation) judges
it, and its errors, which name a path (`search.params.lr.low`), are put back beside the
field they name (`add_errors`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms

from trainhub.experiments.searchspec import GOALS, METHODS

from .forms import parse_yaml

ENABLED = "experiment"  # the checkbox: submit an experiment, not one job
PARAMS = "search.params"
NUMBERS = ("search.max_trials", "search.max_concurrent", "search.max_budget")
# A new search starts from the example job's arguments (ps_runtime.examples.movielens).
INITIAL = {
    "search.method": "asha",
    "search.metric": "test_rmse",
    "search.goal": "minimize",
    "search.max_trials": "9",
    "search.max_concurrent": "2",
    "search.max_budget": "5",
    PARAMS: "lr: {type: log_uniform, low: 0.005, high: 0.2}\n"
    "dim: {type: categorical, values: [16, 32, 64]}\n",
}


def _number(label: str, help_text: str) -> forms.CharField:
    # Text, not an integer field: the search validator's message is the only one.
    return forms.CharField(
        label=label,
        required=False,
        help_text=help_text,
        widget=forms.NumberInput(attrs={"step": "1", "min": "1", "inputmode": "numeric"}),
    )


class SearchForm(forms.Form):
    """The search block; `enabled` when its checkbox is ticked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields[ENABLED] = forms.BooleanField(
            label="Run a hyperparameter search (an experiment) over this job",
            required=False,
            help_text="Each trial is the job above with the values below as arguments; the "
            "search starts, stops and promotes trials by their metric.",
        )
        self.fields["search.method"] = forms.CharField(
            label="Method",
            required=False,
            help_text="asha stops poor trials early and gives the best ones more budget",
            widget=forms.Select(choices=[(m, m) for m in METHODS]),
        )
        self.fields["search.metric"] = forms.CharField(
            label="Metric",
            required=False,
            help_text="a metric the job reports (ps_runtime.report), e.g. test_rmse",
            widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        )
        self.fields["search.goal"] = forms.CharField(
            label="Goal",
            required=False,
            widget=forms.Select(choices=[(g, g) for g in GOALS]),
        )
        self.fields["search.max_trials"] = _number("Trials at most", "default 16")
        self.fields["search.max_concurrent"] = _number("Trials at once", "default 2")
        self.fields["search.max_budget"] = _number(
            "Budget per trial",
            "its full length in epochs, passed as the epochs argument; required for asha",
        )
        self.fields[PARAMS] = forms.CharField(
            label="Parameters (YAML)",
            required=False,
            strip=False,
            help_text="argument: {type: uniform|log_uniform|int, low, high} or "
            "{type: categorical, values: [...]}, one per line",
            widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "code"}),
        )

    @property
    def enabled(self) -> bool:
        """The checkbox as posted (or, unbound, as it starts)."""
        return bool(self[ENABLED].value())

    def search_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name != ENABLED]

    def document(self) -> dict[str, Any]:
        """The `search:` block typed (blank fields left out: their defaults).

        Raises:
            SpecDocumentError: the parameters are not YAML.
        """
        self.is_valid()
        values = self.cleaned_data
        block: dict[str, Any] = {}
        for name in self.fields:
            raw = values.get(name, "")
            if name == ENABLED or raw in ("", None):
                continue
            key = name.removeprefix("search.")
            if name == PARAMS:
                block[key] = parse_yaml(str(raw), path=PARAMS)
            elif name in NUMBERS:
                text = str(raw).strip()
                # Whole numbers to the validator; anything else (a huge one too) as text,
                # which it refuses naming the field.
                whole = text.lstrip("-").isdigit() and len(text) <= 18
                block[key] = int(text) if whole else raw
            else:
                block[key] = raw
        return block

    def add_errors(self, errors: Iterable[tuple[str, str]]) -> None:
        """Each error beside the field it names (a parameter's beside the parameters,
        with its path); others on top of the section, with their path."""
        for path, message in errors:
            if path in self.fields:
                self.add_error(path, message)
            elif path.startswith(PARAMS + "."):
                self.add_error(PARAMS, f"{path.removeprefix(PARAMS + '.')}: {message}")
            else:
                self.add_error(None, f"{path}: {message}" if path else message)

    @property
    def error_count(self) -> int:
        return sum(len(messages) for messages in self.errors.values())
