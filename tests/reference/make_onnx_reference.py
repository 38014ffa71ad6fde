#!/usr/bin/python3
"""Writes the ONNX Runtime runner's test data (for tests/test_onnx_runtime_runner.cpp): two tiny models exported by
PyTorch's own torch.onnx.export, so the runner is checked against a producer other than tapegrad, and PyTorch's
outputs for fixed inputs:
    tests/data/onnx_runner_mixed.onnx    inputs x float32 [N, 4], tokens int64 [N]; outputs y float32 [N, 3]
                                         (relu(Linear(4, 3)(x)) + Embedding(5, 3)(tokens)), p = softmax(y, 1);
                                         opset 13, batch axis dynamic
    tests/data/onnx_runner_float64.onnx  input x float64 [N, 4]; output y = tanh(Linear(4, 2)(x)) float64
    tests/data/onnx_runner_reference.txt inputs and PyTorch's outputs at N = 5 (mixed) and N = 3 (float64)

Run with Debian's python3-torch (torch.onnx.export needs no `onnx` Python module):
    /usr/bin/python3 tests/reference/make_onnx_reference.py

Format (as layers_reference.txt): one entry per line, `key shape values...`, values as Python reprs.
"""
import os

import torch


def fmt_tensor(key, t):
    t = torch.as_tensor(t).detach().to(torch.float64)
    shape = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    return f"{key} {shape} {values}".rstrip() + "\n"


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.embedding = torch.nn.Embedding(5, 3)

    def forward(self, x, tokens):
        y = torch.relu(self.linear(x)) + self.embedding(tokens)
        return y, torch.softmax(y, dim=1)


class Double(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2).double()

    def forward(self, x):
        return torch.tanh(self.linear(x))


def main():
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    torch.manual_seed(41)
    lines = ["# written by tests/reference/make_onnx_reference.py (torch " + torch.__version__ + ")\n"]

    mixed = Mixed().eval()
    x = torch.randn(5, 4)
    tokens = torch.tensor([0, 4, 2, 2, 1], dtype=torch.int64)
    with torch.no_grad():
        y, p = mixed(x, tokens)
    torch.onnx.export(mixed, (x, tokens), os.path.join(data, "onnx_runner_mixed.onnx"), opset_version=13,
                      input_names=["x", "tokens"], output_names=["y", "p"],
                      dynamic_axes={"x": {0: "batch"}, "tokens": {0: "batch"}, "y": {0: "batch"}, "p": {0: "batch"}})
    lines += [fmt_tensor("mixed/x", x), fmt_tensor("mixed/tokens", tokens), fmt_tensor("mixed/y", y),
              fmt_tensor("mixed/p", p)]

    double = Double().eval()
    xd = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        yd = double(xd)
    torch.onnx.export(double, (xd,), os.path.join(data, "onnx_runner_float64.onnx"), opset_version=13,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    lines += [fmt_tensor("float64/x", xd), fmt_tensor("float64/y", yd)]

    with open(os.path.join(data, "onnx_runner_reference.txt"), "w") as out:
        out.writelines(lines)


if __name__ == "__main__":
    main()
