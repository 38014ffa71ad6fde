#!/usr/bin/python3
"""Writes tests/data/large_logit_reference.txt: PyTorch's float32 cross_entropy, log_softmax, softmax and
logsumexp at large logit scales, for tests/test_loss_numerics.cpp.

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_large_logit_reference.py

Format: one entry per line, `key values...`, values are Python reprs (round-trip exact doubles).
For each op, form F and scale S, `OP/F/S/x` holds the float32 inputs (4 rows of 5 logits: S times BASE for
F = scaled, S plus BASE for F = shifted, rounded to float32), `OP/F/S/torch32_value` and `OP/F/S/torch32_grad`
PyTorch's float32 results, and `OP/F/S/exact_value`, `OP/F/S/exact_grad` the float64 results on the same
(float32-rounded) inputs, the truth both are judged by. BASE's entries are multiples of 1/16, so S + BASE
is exact in float32 up to S = 1e6; shifted logits keep O(1) differences at any magnitude, which is where
a rounded log-sum-exp shows.
The scalar that is differentiated is sum(out * WEIGHTS) for the ops with a tensor output (WEIGHTS broadcast
over rows), and the mean cross-entropy with LABELS.
"""
import os

import torch

SCALES = ["1", "1e2", "1e4", "1e5", "1e6", "1e30"]
BASE = [
    [0.25, -0.5, 0.125, 0.75, -1.0],
    [0.0, 0.0625, -0.0625, 0.5, 0.4375],
    [-0.875, -0.25, 1.0, 0.9375, 0.3125],
    [0.5, 0.5, 0.5, -0.5, 0.5625],
]
LABELS = [3, 4, 2, 0]
WEIGHTS = [0.5, -1.0, 2.0, 0.25, -0.75]


def run(op, x):
    x = x.clone().requires_grad_(True)
    w = torch.tensor(WEIGHTS, dtype=x.dtype)
    if op == "cross_entropy":
        out = torch.nn.functional.cross_entropy(x, torch.tensor(LABELS))
        scalar = out
    elif op == "log_softmax":
        out = torch.log_softmax(x, 1)
        scalar = (out * w).sum()
    elif op == "softmax":
        out = torch.softmax(x, 1)
        scalar = (out * w).sum()
    elif op == "logsumexp":
        out = torch.logsumexp(x, 1)
        scalar = (out * w[:4]).sum()
    scalar.backward()
    return out.detach().reshape(-1).tolist(), x.grad.reshape(-1).tolist()


def main():
    lines = ["# written by tests/reference/make_large_logit_reference.py with torch " + torch.__version__]
    for op in ["cross_entropy", "log_softmax", "softmax", "logsumexp"]:
        for form in ["scaled", "shifted"]:
            for scale in SCALES:
                base = torch.tensor(BASE, dtype=torch.float64)
                x = base * float(scale) if form == "scaled" else base + float(scale)
                x32 = x.to(torch.float32)
                value32, grad32 = run(op, x32)
                value64, grad64 = run(op, x32.to(torch.float64))
                if op == "logsumexp":
                    # Note: PyTorch's logsumexp backward is exp(x - result), with the result rounded: even in
                    # float64 it is wrong at 1e30 (1e30 + log 5 rounds to 1e30, so every entry gets 1, not
                    # 1/5). The truth is the softmax, which PyTorch computes stably.
                    x64 = x32.to(torch.float64)
                    w = torch.tensor(WEIGHTS[:4], dtype=torch.float64).reshape(4, 1)
                    grad64 = (torch.softmax(x64, 1) * w).reshape(-1).tolist()
                key = f"{op}/{form}/{scale}"
                for name, values in [("x", x32.reshape(-1).tolist()), ("torch32_value", value32),
                                     ("torch32_grad", grad32), ("exact_value", value64), ("exact_grad", grad64)]:
                    lines.append(f"{key}/{name} " + " ".join(repr(float(v)) for v in values))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "large_logit_reference.txt")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
