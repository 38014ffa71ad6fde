#!/usr/bin/python3
"""Writes tests/data/packed_reference.txt (PyTorch's numbers for test_packed_sequence.cpp): RNN / LSTM / GRU over
variable-length batches packed by torch.nn.utils.rnn.pack_padded_sequence.

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_packed_reference.py

Format (as rnn_reference.txt): one entry per line, `key shape values...` (shape comma-separated, "-" for a 0-dim
scalar; values round-trip exact doubles, integers written as doubles). Keys are `case/field`. Every case is float64
over the grid kind (0 RNN tanh, 2 LSTM, 2 LSTM with proj_size 2, 3 GRU) x bidirectional x num_layers 1/2 x
enforce_sorted x batch_first, input_size 2, hidden_size 3, a padded input of 5 steps and 3 sequences of lengths
at most 4 (so padding is also cut). Per case: the options, parameters (`param/NAME`, PyTorch's seeded
initialisation), the padded `input` and `lengths`, h0 / c0 in the caller's order in every other case, the packed
output's `data`, `batch_sizes` and `sorted_indices` (when not enforce_sorted), `padded` and `padded_lengths`
(pad_packed_sequence of the output, same batch_first), h_n, c_n, and the gradients of sum(data * w_data) +
sum(h_n * w_h_n) (+ sum(c_n * w_c_n)) with respect to the padded input, h0, c0 and every parameter.
"""
import itertools
import os

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def fmt_tensor(key, t):
    t = torch.as_tensor(t).detach().to(torch.float64)
    shape = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    return f"{key} {shape} {values}".rstrip() + "\n"


def scalar(v):
    return torch.tensor(float(v), dtype=torch.float64)


KINDS = [("rnn", 0, 0), ("lstm", 2, 0), ("lstmproj", 2, 2), ("gru", 3, 0)]


def write_case(lines, index, kind_name, kind, proj, bidir, layers, enforce_sorted, batch_first):
    name = f"{kind_name}_d{2 if bidir else 1}_l{layers}_{'sorted' if enforce_sorted else 'unsorted'}" + (
        "_bf" if batch_first else "")
    torch.manual_seed(2000 + index)
    I, H, T, B = 2, 3, 5, 3
    kw = dict(num_layers=layers, batch_first=batch_first, bidirectional=bidir)
    if kind == 2:
        m = torch.nn.LSTM(I, H, proj_size=proj, **kw)
    elif kind == 3:
        m = torch.nn.GRU(I, H, **kw)
    else:
        m = torch.nn.RNN(I, H, **kw)
    m = m.double()
    states = index % 2 == 1
    for key, v in [("kind", kind), ("proj_size", proj), ("num_layers", layers), ("bidirectional", bidir),
                   ("enforce_sorted", enforce_sorted), ("batch_first", batch_first), ("states", states)]:
        lines.append(fmt_tensor(f"{name}/{key}", scalar(v)))
    for pname, p in m.named_parameters():
        lines.append(fmt_tensor(f"{name}/param/{pname}", p))
    # sorted: a tie and a length-1 sequence; unsorted: a tie across the permutation, or all different
    if enforce_sorted:
        lengths = [4, 2, 2] if index % 4 < 2 else [4, 3, 1]
    else:
        lengths = [2, 4, 2] if index % 4 < 2 else [1, 3, 4]
    x = torch.randn((B, T, I) if batch_first else (T, B, I), dtype=torch.float64, requires_grad=True)
    lines.append(fmt_tensor(f"{name}/input", x))
    lines.append(fmt_tensor(f"{name}/lengths", torch.tensor(lengths)))
    d = 2 if bidir else 1
    out_h = proj if proj > 0 else H
    h0 = c0 = None
    if states:
        h0 = torch.randn((layers * d, B, out_h), dtype=torch.float64, requires_grad=True)
        lines.append(fmt_tensor(f"{name}/h0", h0))
        if kind == 2:
            c0 = torch.randn((layers * d, B, H), dtype=torch.float64, requires_grad=True)
            lines.append(fmt_tensor(f"{name}/c0", c0))
    packed = pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    if kind == 2:
        out, (hn, cn) = m(packed, (h0, c0)) if states else m(packed)
    else:
        out, hn = m(packed, h0) if states else m(packed)
        cn = None
    lines.append(fmt_tensor(f"{name}/batch_sizes", out.batch_sizes))
    if out.sorted_indices is not None:
        lines.append(fmt_tensor(f"{name}/sorted_indices", out.sorted_indices))
    padded, padded_lengths = pad_packed_sequence(out, batch_first=batch_first)
    lines.append(fmt_tensor(f"{name}/padded", padded))
    lines.append(fmt_tensor(f"{name}/padded_lengths", padded_lengths))
    loss = 0
    for field, t in [("data", out.data), ("h_n", hn), ("c_n", cn)]:
        if t is None:
            continue
        w = torch.randn(t.shape, dtype=torch.float64)
        lines.append(fmt_tensor(f"{name}/{field}", t))
        lines.append(fmt_tensor(f"{name}/w_{field}", w))
        loss = loss + (t * w).sum()
    wrt = [x] + ([h0] if h0 is not None else []) + ([c0] if c0 is not None else [])
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad(loss, wrt + list(m.parameters()))
    lines.append(fmt_tensor(f"{name}/grad_input", grads[0]))
    k = 1
    if h0 is not None:
        lines.append(fmt_tensor(f"{name}/grad_h0", grads[k]))
        k += 1
    if c0 is not None:
        lines.append(fmt_tensor(f"{name}/grad_c0", grads[k]))
        k += 1
    for pname, g in zip(names, grads[k:]):
        lines.append(fmt_tensor(f"{name}/grad/{pname}", g))


def main():
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    lines = ["# PyTorch " + torch.__version__ + " reference for test_packed_sequence.cpp "
             "(tests/reference/make_packed_reference.py)\n"]
    grid = itertools.product(KINDS, [False, True], [1, 2], [True, False], [False, True])
    for index, ((kind_name, kind, proj), bidir, layers, enforce_sorted, batch_first) in enumerate(grid):
        write_case(lines, index, kind_name, kind, proj, bidir, layers, enforce_sorted, batch_first)
    with open(os.path.join(data, "packed_reference.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
