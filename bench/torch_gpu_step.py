#!/usr/bin/env python3
"""PyTorch eager on the GPU: the peer of `build/bench/train_step --device cuda`.

The same training steps as mixgrad's benchmark (bench/train_step.cpp): forward, cross entropy,
backward and SGD with momentum 0.9 (lr 0.01) on one fixed batch, for
  mlp   784-256-256-10 at batch 128 and 512
  cnn   nn::cnn (conv 3x3 32, ReLU, pool 2, conv 3x3 64, ReLU, pool 2, Linear 128, ReLU, Linear 10) at 128 and 512
  wide  4096-4096-4096-4096-10 at batch 8192 (GEMM-bound)
in fp32, mixed_float16 (torch.autocast(float16) + torch.amp.GradScaler) and mixed_bfloat16
(torch.autocast(bfloat16), no scaler). Each variant warms up for 5 steps, then the median of
--steps timed steps is printed (torch.cuda.synchronize() closes every step, as mixgrad's does),
with the peak memory of one step (torch.cuda.max_memory_allocated after reset_peak_memory_stats).
TF32 stays off (fp32 means fp32, as in mixgrad).

  python3 bench/torch_gpu_step.py [--steps 50] [mlp:128 cnn:512 wide:8192 ...]
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "wide":
        return nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class Step:
    def __init__(self, model_name, recipe, batch):
        torch.manual_seed(0)
        self.model = make_model(model_name).cuda()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        shape = (batch, 4096) if model_name == "wide" else (batch, 1, 28, 28)
        self.x = torch.randn(shape, device="cuda")
        self.labels = torch.randint(0, 10, (batch,), device="cuda")
        self.dtype = {"fp32": None, "mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16}[recipe]
        self.scaler = torch.amp.GradScaler("cuda", enabled=recipe == "mixed_float16")

    def __call__(self):
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=self.dtype or torch.float16, enabled=self.dtype is not None):
            loss = nn.functional.cross_entropy(self.model(self.x), self.labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        torch.cuda.synchronize()


def run(model_name, batch, steps):
    recipes = ["fp32", "mixed_float16", "mixed_bfloat16"]
    variants = {r: Step(model_name, r, batch) for r in recipes}
    times = {r: [] for r in recipes}
    peaks = {}
    for r, step in variants.items():
        for _ in range(5):
            step()
        torch.cuda.reset_peak_memory_stats()
        step()
        peaks[r] = torch.cuda.max_memory_allocated()
    for _ in range(steps):  # interleaved, so a noisy machine slows every variant alike
        for r, step in variants.items():
            begin = time.perf_counter()
            step()
            times[r].append((time.perf_counter() - begin) * 1e3)
    print(f"\n{model_name} batch {batch} on {torch.cuda.get_device_name()} ({steps} timed steps each, median)")
    print(f"  {'variant':<24} {'ms/step':>10} {'peak GPU MiB':>14}")
    for r in recipes:
        print(f"  {'pytorch ' + r:<24} {statistics.median(times[r]):>10.3f} {peaks[r] / 2**20:>14.1f}")
    fp32 = statistics.median(times["fp32"])
    for r in recipes[1:]:
        print(f"  {r} / fp32 (pytorch): {statistics.median(times[r]) / fp32:.3f}x time, "
              f"{peaks[r] / peaks['fp32']:.3f}x peak memory")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("cases", nargs="*", default=["mlp:128", "mlp:512", "cnn:128", "wide:8192", "cnn:512"])
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
          f"SGD momentum 0.9, TF32 off")
    for case in args.cases:
        name, batch = case.split(":")
        run(name, int(batch), args.steps)


if __name__ == "__main__":
    main()
