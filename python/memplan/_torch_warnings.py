"""The warnings torch.onnx.export raises that memplan.torch.export silences, and why (torch 1.13, Debian's).

A training-mode export of a module with BatchNorm warns twice per BatchNorm (40 lines for torchvision's
resnet18, 106 for resnet50), and neither warning says anything about memplan's answer. Only those two are
silenced, each matched by its category and message (and, for the tracer's, by the module it is raised from);
every other warning reaches the user, in particular the tracer's warnings about the user's own code (a branch or
a size frozen into the graph at the example input: memplan then estimates the traced path, and a dimension
read as a Python number no longer binds with ``batch=`` or ``dims=``).

1. UserWarning "ONNX Preprocess - Removing mutation from node aten::add_ on block input:
   '<...>num_batches_tracked'. This changes graph semantics." (raised by
   torch/csrc/jit/passes/onnx/remove_inplace_ops_for_onnx.cpp, the warning names the file). In training mode
   BatchNorm counts its steps in place (torch/nn/modules/batchnorm.py, ``_BatchNorm.forward``:
   ``self.num_batches_tracked.add_(1)``); the exporter drops that increment of a 0-d int64 buffer. The buffer
   stays an initializer of the graph and memplan counts its 8 bytes either way; nothing else in the step depends
   on it. A mutation removed from any other input is not matched and still warns.
2. torch.jit.TracerWarning "Converting a tensor to a Python boolean might cause the trace to be incorrect"
   raised from torch.nn.functional itself. In torch 1.13 the tensor-to-bool conversions there are argument
   checks that raise or pass and record no op: BatchNorm in training calls ``_verify_batch_size``
   (torch/nn/functional.py, ``batch_norm``), which compares batch x spatial size with 1 to reject a single
   value per channel. The traced graph is the same for every batch. The same warning raised from any other
   module (the user's forward) is not matched and still warns.

torch is imported only when an export runs (memplan.torch's rule: importing memplan works without torch).
"""
from __future__ import annotations

import contextlib
import warnings

_MUTATION_OF_BATCH_COUNTER = r"ONNX Preprocess - Removing mutation from node aten::add_ on block input: " \
                             r"'[^']*num_batches_tracked'"
_TRACER_BOOL = r"Converting a tensor to a Python boolean"
_TRACER_BOOL_MODULE = r"torch\.nn\.functional\Z"


@contextlib.contextmanager
def harmless_export_warnings_silenced():
    """Around torch.onnx.export: the two warnings above are dropped, every other one passes as it would."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_MUTATION_OF_BATCH_COUNTER, category=UserWarning)
        warnings.filterwarnings("ignore", message=_TRACER_BOOL, category=torch.jit.TracerWarning,
                                module=_TRACER_BOOL_MODULE)
        yield
