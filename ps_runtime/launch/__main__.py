"""`python -m ps_runtime.launch`: the local launcher (`ps_runtime.launch.local`)."""

from ps_runtime.launch.local import main

if __name__ == "__main__":
    raise SystemExit(main())
