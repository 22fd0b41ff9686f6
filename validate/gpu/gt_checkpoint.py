"""Checkpointing at block boundaries, and the names the ONNX export gives the tensors kept between blocks, so
memplan can be told `--checkpoint at:NAME,...` for exactly what PyTorch keeps."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

import torch.nn as nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO_DIR = os.path.join(REPO, "tests", "models")


# Checkpoint segments: one per block, at the module boundaries people checkpoint in practice (a ResNet stage,
# an inverted-residual / MBConv stage, a transformer layer). The tensors kept between segments are the
# blocks' outputs, whose ONNX names memplan takes as `--checkpoint at:NAME,...`.
CHECKPOINT_BLOCKS: Dict[str, List[str]] = {
    "resnet18": [f"layer{i}" for i in range(1, 5)],
    "resnet50": [f"layer{i}" for i in range(1, 5)],
    "mobilenet_v2": [f"features.{i}" for i in range(1, 19)],
    "efficientnet_b0": [f"features.{i}" for i in range(1, 9)],
    "vit_b_16": [f"encoder.layers.encoder_layer_{i}" for i in range(12)],
    "gpt": [f"blocks.{i}" for i in range(12)],
    "bert": [f"blocks.{i}" for i in range(12)],
    "gpt_tiny": [f"blocks.{i}" for i in range(2)],
}


def onnx_scope_level(qualified_name: str) -> str:
    """The segment torch.onnx puts in the node names of a submodule's ops: its last name part, with the
    container's name in front for an index ('features.3' -> 'features.3', 'blocks.0' -> 'blocks.0',
    'encoder.layers.encoder_layer_0' -> 'encoder_layer_0', 'layer1' -> 'layer1'). The levels above it differ
    (a called Sequential adds '/features/', an uncalled ModuleList adds nothing), so only this one is matched:
    a node is inside the block when '/<segment>/' is in its name."""
    parts = qualified_name.split(".")
    if parts[-1].isdigit() and len(parts) > 1:
        return f"{parts[-2]}.{parts[-1]}"
    return parts[-1]


def onnx_boundaries(model: str, blocks: Sequence[str]) -> Dict[str, Any]:
    """The `--checkpoint at:` list for checkpointing each of `blocks`, in bench/cpu_ground_truth's convention
    (the one memplan reads): B1..Bk where the graph between consecutive boundaries is one checkpointed segment
    and what precedes B1 or follows Bk runs normally. So B1 is the first block's input (the stem's or the
    embedding's output) and B2..Bk are the blocks' outputs. A block's output is the result of a node in its
    scope that a node outside reads; its input is the first non-weight input of its first non-Constant node.
    Read from the training export (<model>_train.onnx) when it exists, else the inference export; weights
    are never loaded."""
    try:
        import onnx
    except ImportError:
        return {"source": None, "names": [], "error": "onnx is not installed"}
    path = next((p for p in (os.path.join(ZOO_DIR, f"{model}_train.onnx"), os.path.join(ZOO_DIR, f"{model}.onnx"))
                 if os.path.exists(p)), None)
    if path is None:
        return {"source": None, "names": [], "error": f"no ONNX export of {model} in tests/models"}
    graph = onnx.load(path, load_external_data=False).graph
    graph_outputs = {o.name for o in graph.output}
    weights = {i.name for i in graph.initializer}
    names: List[Optional[str]] = []
    for index, block in enumerate(blocks):
        segment = "/" + onnx_scope_level(block) + "/"
        inside = [n for n in graph.node if segment in n.name]
        produced = {o for n in inside for o in n.output}
        if index == 0:
            first = next((n for n in inside if n.op_type != "Constant"), None)
            inputs = first.input if first is not None else []
            entry = [i for i in inputs if i and i not in weights and i not in produced]
            names.append(entry[0] if entry else None)
        read_outside = {i for n in graph.node if segment not in n.name for i in n.input if i in produced}
        leaving = [o for n in inside for o in n.output if o in read_outside or o in graph_outputs]
        names.append(leaving[-1] if leaving else None)  # the block's last result that leaves it
    return {"source": os.path.relpath(path, REPO), "names": names}


class Checkpointed(nn.Module):
    """Runs a block under torch.utils.checkpoint: only its inputs are kept, its activations are recomputed in
    backward. Reentrant (use_reentrant=True, torch 1.13's default, memplan's default) or not (use_reentrant=False,
    memplan's --checkpoint-impl non-reentrant; with torch >= 2.1's early stop); every block input here comes from
    parameters, so it requires grad."""

    def __init__(self, block: nn.Module, reentrant: bool = True):
        super().__init__()
        self.block = block
        self.reentrant = reentrant

    def forward(self, *args):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.block, *args, use_reentrant=self.reentrant)


def apply_checkpointing(module: nn.Module, blocks: Sequence[str], reentrant: bool = True) -> None:
    for qualified in blocks:
        parent_name, _, leaf = qualified.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, leaf, Checkpointed(getattr(parent, leaf), reentrant))
