"""PyTorch on the parameter servers: torch models whose state lives on the PS.

`PSEmbedding` is an embedding layer over a PS table (rows pulled per batch, sparse
gradients pushed in backward, the table's optimizer applied on the PS);
`PSParameters` puts the dense parameters of any `nn.Module` on the PS (one flat float32
variable: a step is one pull and one push) and binds them to a worker's copy of the
module (`pull`, `push`, `flush`); `load_model` reads an exported model as tensors.

The only package of the runtime that imports torch (the distribution's `torch`
extra); importing `ps_runtime` itself never does.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ModuleNotFoundError as e:  # the runtime was installed without its extra
    raise ModuleNotFoundError(
        "ps_runtime.pytorch needs PyTorch: install trainhub-runtime[torch], or list torch "
        "in the job's environment requirements",
        name=e.name,
    ) from e

from ps_runtime.pytorch.embedding import PSEmbedding
from ps_runtime.pytorch.model import TorchModel, TorchTable, load_model
from ps_runtime.pytorch.parameters import BoundParameters, PSParameters

__all__ = [
    "BoundParameters",
    "PSEmbedding",
    "PSParameters",
    "TorchModel",
    "TorchTable",
    "load_model",
]
