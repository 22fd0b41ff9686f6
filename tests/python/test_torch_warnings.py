"""memplan.torch.export silences torch.onnx.export's two harmless per-BatchNorm warnings (python/memplan/
_torch_warnings.py says which and why) and lets every other warning through.

Needs Debian's torch 1.13 and torchvision (python3-torch, python3-torchvision); skipped without them.
"""
import warnings

import pytest

try:
    import torch
    from torchvision.models.resnet import BasicBlock, ResNet
except ImportError:  # each test is skipped, rather than the file (pytest exits 5 when it collects nothing)
    torch = None

import memplan.torch  # noqa: E402

pytestmark = pytest.mark.skipif(torch is None, reason="needs Debian's python3-torch and python3-torchvision")

MUTATION = "ONNX Preprocess - Removing mutation from node aten::add_ on block input"
TRACER_BOOL = "Converting a tensor to a Python boolean"

# torchvision's ResNet with one BasicBlock per stage: BatchNorms = the stem's bn1, two per block (4 blocks: 8),
# and one in the downsample of stages 2, 3 and 4 (3) = 12.
BATCH_NORMS = 12


def small_resnet():
    torch.manual_seed(0)
    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)


def recorded(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def count(caught, category, text, module=None):
    return sum(1 for w in caught if issubclass(w.category, category) and text in str(w.message)
               and (module is None or w.filename.endswith(module)))


def test_torch_alone_warns_twice_per_batch_norm():
    """The premise, so the next test could fail: torch.onnx.export itself raises both warnings once per BatchNorm
    of a training-mode export (torch 1.13)."""
    import io

    model = small_resnet().train()
    caught = recorded(lambda: torch.onnx.export(model, (torch.randn(2, 3, 32, 32),), io.BytesIO(), opset_version=17,
                                                training=torch.onnx.TrainingMode.PRESERVE,
                                                do_constant_folding=False))
    assert count(caught, UserWarning, MUTATION) == BATCH_NORMS
    assert count(caught, torch.jit.TracerWarning, TRACER_BOOL, "torch/nn/functional.py") == BATCH_NORMS


@pytest.mark.parametrize("train", [True, False])
def test_export_of_a_resnet_with_batch_norm_is_quiet(train, tmp_path):
    model = small_resnet()
    caught = recorded(lambda: memplan.torch.export(model, (torch.randn(2, 3, 32, 32),), tmp_path / "r.onnx",
                                                   train=train))
    assert count(caught, UserWarning, MUTATION) == 0
    assert count(caught, torch.jit.TracerWarning, TRACER_BOOL) == 0
    assert [str(w.message) for w in caught] == []  # and nothing else either: a clean export says nothing


class BranchOnData(torch.nn.Module if torch is not None else object):
    """A forward whose branch depends on the data: the trace keeps the branch the example input took, so memplan
    estimates that path only. torch's warning about it says something about memplan's answer."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x):
        y = self.bn(x)
        if y.sum() > 0:  # the tracer's tensor-to-bool warning, raised from this file
            return y * 2
        return y


def test_a_warning_about_the_users_code_still_gets_through(tmp_path):
    caught = recorded(lambda: memplan.torch.export(BranchOnData(), (torch.randn(2, 3, 8, 8),), tmp_path / "b.onnx"))
    # The same message as the silenced BatchNorm check, raised from the user's forward: kept, exactly once.
    assert count(caught, torch.jit.TracerWarning, TRACER_BOOL, "test_torch_warnings.py") == 1
    # The module's own BatchNorm's two warnings are silenced as in the ResNet.
    assert count(caught, torch.jit.TracerWarning, TRACER_BOOL, "torch/nn/functional.py") == 0
    assert count(caught, UserWarning, MUTATION) == 0


def test_a_mutation_removed_from_another_input_still_warns(tmp_path):
    """Only the BatchNorm step counter's increment is silenced: an in-place update of another buffer, which the
    exported graph then does not perform, still warns."""

    class CountsCalls(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))

        def forward(self, x):
            self.calls.add_(1)
            return x * 2

    caught = recorded(lambda: memplan.torch.export(CountsCalls(), (torch.randn(2, 3),), tmp_path / "c.onnx"))
    assert count(caught, UserWarning, MUTATION + ": 'calls'") == 1
