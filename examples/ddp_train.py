"""Train a tgweb sample under PyTorch's DistributedDataParallel, then write a tgweb
checkpoint that the page's Load button and tgweb.io.checkpoint read.

    torchrun --nproc_per_node=4 examples/ddp_train.py --sample addition --steps 1000 --out a.safetensors

NCCL on GPUs, gloo on CPUs, unchanged. Each step, rank r of N trains on the sample's
batch number step * N + r (the data sharded by rank); DDP averages the gradients,
so N processes train as one process on an N times larger batch would.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tgweb as tg
from tgweb import samples
from tgweb.io import checkpoint
from tgweb.trace import input_spec

NP = {"f32": np.float32, "i32": np.int32, "bool": np.bool_}


def batch_tensors(mod, index: int, device) -> dict[str, torch.Tensor]:
    out = {}
    for name, spec in mod.INPUTS.items():
        shape, dtype = input_spec(name, spec)
        out[name] = torch.from_numpy(np.asarray(mod.batch(index)[name], NP[dtype]).reshape(shape)).to(device)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default="addition", choices=sorted(samples.SAMPLES))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="checkpoint path (written by rank 0)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}") if cuda else torch.device("cpu")
    mod = samples.get(args.sample)
    # the trainer holds the initial weights, the optimizer and the schedule; PyTorch trains
    trainer = samples.compile(mod, backend="reference", seed=args.seed)
    module = tg.to_torch(mod.Model(), mod.loss_fn, inputs=mod.INPUTS)
    module.load_params(trainer.params())
    module.to(device)
    ddp = DistributedDataParallel(module)
    opt, sched = tg.to_torch_optimizer(trainer, module)
    for step in range(args.steps):
        loss = ddp(**batch_tensors(mod, step * world + rank, device))
        loss.backward()
        if trainer.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), trainer.clip_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad()
        if rank == 0 and (step + 1) % max(1, args.steps // 10) == 0:
            print(f"step {step + 1}: loss {loss.item():.5f}", flush=True)
    if rank == 0 and args.out:
        module.cpu()
        tg.load_from_torch(trainer, module, opt, sched)
        checkpoint.save_file(
            trainer, args.out, metadata={"sample": args.sample, "trained_by": f"ddp x{world}"}
        )
        print(f"wrote {args.out} after {trainer.steps} steps", flush=True)
    # both ranks leave together: a rank that tears its group down while rank 0 still
    # writes the checkpoint made gloo abort rank 0 at exit
    dist.barrier()
    dist.destroy_process_group()
    # gloo's worker threads can still hold finished work and its tensors, whose release while
    # the interpreter finalizes aborts the process now and then ("terminate called without an
    # active exception", pytorch/pytorch#179291): the run is done and its file written and
    # closed, so the rank leaves without finalizing
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
