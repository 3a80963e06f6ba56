"""torch is an optional extra: only `ps_runtime.pytorch` imports it (docs/design.md
"PyTorch on the PS"); the agent, coordinator, servers and the rest never do."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# In a fresh interpreter: import the package, then every other module of the runtime,
# and report which (if any) pulled torch in.
_PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    import ps_runtime
    loaded = ["ps_runtime"] if "torch" in sys.modules else []
    names = []

    def walk(package):
        # Not pkgutil.walk_packages: it imports every subpackage to recurse into it.
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            if info.name == "ps_runtime.pytorch" or info.name.endswith("__main__"):
                continue
            names.append(info.name)
            module = importlib.import_module(info.name)
            if "torch" in sys.modules and not loaded:
                loaded.append(info.name)
            if info.ispkg:
                walk(module)

    walk(ps_runtime)
    import ps_runtime.pytorch
    print(json.dumps({"modules": names, "torch_from": loaded,
                      "pytorch_loads_torch": "torch" in sys.modules}))
    """
)


def test_only_ps_runtime_pytorch_imports_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    modules = set(report["modules"])
    for name in (
        "ps_runtime.agent.daemon",
        "ps_runtime.coordinator.cluster_coordinator",
        "ps_runtime.server.servicer",
        "ps_runtime.client.client",
        "ps_runtime.launch.task",
        "ps_runtime.examples.movielens",
    ):
        assert name in modules  # the walk reached every package
    assert report["torch_from"] == []
    assert report["pytorch_loads_torch"]  # the probe can see torch arrive
