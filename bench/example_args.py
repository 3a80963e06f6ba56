"""Calling an example's train function with another workload's settings: the example
module (or an error naming its file), and keyword arguments matched to its signature.

Used by bench/torch_ps.py and bench/torch_dlrm.py.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def import_example(module: str) -> Any:
    """The example module, or an error naming the file that should hold it."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.is_file():
        raise SystemExit(f"torch_ps: {path} does not exist (the torch examples, issue 27)")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(module)


def match_settings(
    fn: Callable[..., Any],
    wanted: dict[str, tuple[Any, tuple[str, ...]]],
    fixed: dict[str, tuple[Callable[[str], bool], str]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Keyword arguments for `fn` carrying `wanted`, and how each setting was matched;
    `fixed` checks the settings that `fn` does not take against its module's source."""
    params = inspect.signature(fn).parameters
    source = inspect.getsource(inspect.getmodule(fn) or fn)
    kwargs: dict[str, Any] = {}
    how: dict[str, str] = {}
    for setting, (value, names) in wanted.items():
        name = next((n for n in names if n in params), None)
        if name is None:
            check, said = (fixed or {}).get(setting, (None, ""))
            how[setting] = (
                f"{value!r}: {said}"
                if check is not None and check(source)
                else f"{value!r}: no such argument, NOT matched (the example's own rule)"
            )
            continue
        kwargs[name] = value
        how[setting] = f"{value!r} as {name}"
    return kwargs, how


def accepted(fn: Callable[..., Any], extra: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in extra.items() if k in params}
