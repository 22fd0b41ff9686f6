"""memplan: how much GPU memory an ONNX model needs, and why, before you rent or launch anything.

The same library as the ``memplan`` command. Each function takes the model path and the command's options as
keyword arguments, named as the flags in snake_case (``--grad-accum 4`` is ``grad_accum=4``, ``--dim seq=512``
is ``dims={"seq": 512}``, ``--input ids=8x512`` is ``inputs={"ids": [8, 512]}``), and returns the dictionary
the command's ``--json`` prints (same schema, same numbers: docs/json.md)::

    import memplan
    e = memplan.estimate("gpt.onnx", batch=8, dims={"seq": 512}, mode="train", precision="amp-bf16")
    memplan.check("gpt.onnx", batch=8, dims={"seq": 512}, mode="train", budget="80GB")  # LimitError if over

Errors: :class:`InputError` where the command exits 2 (bad input or options), :class:`LimitError` where it
exits 1 (``check`` over a limit, ``fit`` finding nothing that fits), with the command's messages.
``memplan.torch`` exports, estimates and measures PyTorch modules (it imports torch only when used).
"""
from __future__ import annotations

import json as _json
import os as _os
from typing import Any, Dict, Union

from . import _core

__all__ = ["inspect", "estimate", "plan", "fit", "check", "serve", "Error", "InputError", "InternalError", "LimitError",
           "__version__"]

__version__: str = _core.version

Error = _core.Error
InputError = _core.InputError
InternalError = _core.InternalError
for _e in (Error, InputError, InternalError):
    _e.__module__ = "memplan"


class LimitError(Error):
    """A limit is broken: ``check`` found the estimate over its budget or regression limit, or ``fit`` found
    nothing that fits (the command exits 1). ``result`` holds the dictionary the command's ``--json`` prints."""

    def __init__(self, message: str, result: Dict[str, Any]):
        super().__init__(message)
        self.result = result


LimitError.__module__ = "memplan"

PathLike = Union[str, "_os.PathLike[str]"]


def __getattr__(name: str):
    # memplan.torch without `import memplan.torch` first (it imports torch only when one of its functions runs).
    if name == "torch":
        import importlib

        return importlib.import_module("memplan.torch")
    raise AttributeError(f"module 'memplan' has no attribute {name!r}")


def inspect(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan inspect MODEL --json``: the model as declared and every tensor's shape (memplan.inspect/1)."""
    return _json.loads(_core.inspect(model, **options))


def estimate(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan estimate MODEL --json``: peak memory of inference or a training step (memplan.estimate/1)."""
    return _json.loads(_core.estimate(model, **options))


def plan(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan plan MODEL``: the static arena plan (memplan.plan/1). Options: the model's, runtime, dtype,
    schedule, alignment, and output=PATH to also write the plan file (``-o``)."""
    return _json.loads(_core.plan(model, **options))


def export_config(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan export CONFIG.json --graph G -o OUT.onnx``: writes the graph memplan builds from a Hugging Face
    config.json (``graph="train"``, ``"decode"`` or ``"prefill"``) to ``output=`` as a weight-less ONNX file, and
    returns what it wrote: ``output``, ``bytes``, ``nodes``, ``initializers``. (``memplan.torch.export`` exports a
    PyTorch module instead.)"""
    return _core.export_config(model, **options)


def _limited(command: Any, model: PathLike, options: Dict[str, Any]) -> Dict[str, Any]:
    """A command that can answer "does not fit": its JSON, or LimitError carrying the CLI's message and JSON."""
    text, broken, message = command(model, **options)
    result = _json.loads(text)
    if broken:
        raise LimitError(message, result)
    return result


def fit(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan fit MODEL --json``: the largest batch (or ``search=DIM``) that fits ``gpu=`` or ``memory=``,
    or, with neither, a table over the GPU catalog (memplan.fit/1). Raises :class:`LimitError` when nothing fits."""
    return _limited(_core.fit, model, options)


def check(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan check MODEL --json``: the CI memory gate against ``budget=`` and/or ``baseline=``
    (memplan.check/1). Raises :class:`LimitError` when a limit is broken."""
    return _limited(_core.check, model, options)


def serve(model: PathLike, **options: Any) -> Dict[str, Any]:
    """``memplan serve MODEL --json``: a decoder with a KV cache served by vLLM (``engine="vllm"``, the default:
    vLLM's "GPU KV cache size" in tokens, its maximum concurrency and the budget's terms, memplan.serve.vllm/1) or
    by PyTorch eager (``engine="eager"``: how many sequences of ``context`` tokens fit, memplan.serve/1), SGLang
    (``engine="sglang"``: its token pool, memplan.serve.engine/1), TensorRT-LLM (``engine="trtllm"``: its KV cache
    blocks, memplan.serve.engine/1), or all three on one GPU (``engine="all"``, memplan.serve.engines/1). Raises
    :class:`LimitError` when the engine would not start, or when not one block fits."""
    return _limited(_core.serve, model, options)
