"""A job's code in its own environment (tests/e2e/test_job_environments.py): which
`envpkg` and which Python it runs, and whether it can change its environment. Prints one
JSON line and exits 0."""

import json
import os
import sys
from pathlib import Path


def attempt(action: str, path: Path) -> str:
    try:
        if action == "write":
            with path.open("a") as f:
                f.write("tampered\n")
        elif action == "create":
            path.write_text("planted\n")
        elif action == "remove":
            path.unlink()
        return "done"
    except OSError as exc:
        return type(exc).__name__ + f" errno {exc.errno}"


def main() -> None:
    import envpkg

    package = Path(envpkg.__file__).parent
    site = package.parent
    import ps_runtime

    result = {
        "envpkg": envpkg.VALUE,
        "prefix": sys.prefix,
        "ps_runtime": str(Path(ps_runtime.__file__).parent),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "write_module": attempt("write", package / "__init__.py"),
        "create_in_site": attempt("create", site / "sitecustomize.py"),
        "create_in_bin": attempt("create", Path(sys.prefix) / "bin" / "planted"),
        "remove_module": attempt("remove", package / "__init__.py"),
    }
    print(json.dumps(result), flush=True)


main()
