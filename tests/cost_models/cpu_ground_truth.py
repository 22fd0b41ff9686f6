#!/usr/bin/python3
"""CPU ground truth for memplan's training cost model: the peak live bytes of one PyTorch training step.

Protocol (Debian's /usr/bin/python3: torch 1.13, CPU):
  1. the zoo module (tests/models/zoo.py build_model) in train mode, inputs make_inputs(batch, seq);
  2. optimizer SGD (lr 1e-3), SGD momentum 0.9, or Adam (torch 1.13's default single-tensor update);
  3. one warm-up step, so that optimizer states exist (memplan's steady state), grads freed with
     zero_grad(set_to_none=True);
  4. one step under torch.profiler(profile_memory=True):
        output = model(*inputs); loss = cross_entropy(output.reshape(-1, C), zeros targets);
        loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
  5. peak = the maximum running sum of the profiler's CPU [memory] events (allocations +, frees -),
     counted from 0 at the start of the profiled step. Parameters, optimizer states and the inputs exist
     before it and are not counted; targets, activations, grads and temporaries are.

memplan's comparable figure is `--runtime ideal` training with `--optimizer-impl single-tensor` (Adam):
the program's lower bound minus the graph inputs (live from the start).

Checkpointing (text models): CHECKPOINT_BLOCKS=K runs the first K transformer blocks through
torch.utils.checkpoint.checkpoint (torch 1.13's default reentrant variant); memplan's equivalent is
`--checkpoint at:` the embedding sum and the outputs of blocks 0..K-1.

Usage: cpu_ground_truth.py MODEL BATCH SEQ OPTIMIZER [CHECKPOINT_BLOCKS]   (SEQ 0 for image models)
Prints one JSON object.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import zoo  # noqa: E402


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    raise SystemExit(f"unknown optimizer {name}")


def main():
    name, batch, seq, opt_name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    checkpoint_blocks = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    torch.manual_seed(0)
    module = zoo.build_model(name).module.train()
    inputs = zoo.make_inputs(name, batch=batch, seq=seq) if zoo.is_text(name) else zoo.make_inputs(name, batch=batch)
    optimizer = make_optimizer(opt_name, [p for p in module.parameters() if p.requires_grad])

    def forward():
        if checkpoint_blocks == 0:
            return module(*inputs)
        # GPT.forward with the first blocks checkpointed (tests/models/zoo.py).
        input_ids = inputs[0]
        x = module.embed(input_ids)
        mask = zoo.causal_additive_mask(input_ids.size(1), input_ids.device)
        for i, block in enumerate(module.blocks):
            x = torch.utils.checkpoint.checkpoint(block, x, mask) if i < checkpoint_blocks else block(x, mask)
        return module.head(x)

    def step():
        output = forward()
        targets = torch.zeros(output.numel() // output.shape[-1], dtype=torch.long)
        loss = F.cross_entropy(output.reshape(-1, output.shape[-1]), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # optimizer states now exist
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_us(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    print(json.dumps({"model": name, "batch": batch, "seq": seq, "optimizer": opt_name,
                      "checkpoint_blocks": checkpoint_blocks, "torch": torch.__version__, "peak_bytes": peak}))


if __name__ == "__main__":
    main()
