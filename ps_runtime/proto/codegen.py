"""Regenerate ps_pb2.py, ps_pb2_grpc.py and ps_pb2.pyi from ps.proto."""

from __future__ import annotations

import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent


def main() -> int:
    """Run grpc_tools.protoc on ps.proto and make the generated import package-relative."""
    try:
        from grpc_tools import protoc
    except ImportError:  # pragma: no cover - only without the dev extra
        print("grpcio-tools is missing: pip install -e '.[dev]'", file=sys.stderr)
        return 1
    import grpc_tools

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={PROTO_DIR}",
            f"--pyi_out={PROTO_DIR}",
            f"--grpc_python_out={PROTO_DIR}",
            str(PROTO_DIR / "ps.proto"),
        ]
    )
    if rc != 0:
        return int(rc)
    grpc_module = PROTO_DIR / "ps_pb2_grpc.py"
    text = grpc_module.read_text()
    # protoc emits `import ps_pb2`, which only works with proto/ on sys.path.
    text = re.sub(r"^import ps_pb2 as ", "from . import ps_pb2 as ", text, flags=re.M)
    grpc_module.write_text(text)
    stub = PROTO_DIR / "ps_pb2.pyi"
    stub.write_text("# ruff: noqa\n" + stub.read_text())  # generated; not held to house style
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
