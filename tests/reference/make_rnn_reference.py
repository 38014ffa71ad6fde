#!/usr/bin/python3
"""Writes tests/data/rnn_reference.txt (PyTorch's numbers for test_rnn.cpp) and tests/data/rnn_lstm_trained.pt
(the state_dict of a small LSTM PyTorch trained for a few steps, for load_pytorch).

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_rnn_reference.py

Format (as layers_reference.txt): one entry per line, `key shape values...`, where shape is comma-separated
extents ("-" for a 0-dim scalar) and values are Python reprs (round-trip exact doubles). Keys are `case/field`;
options are 0-dim entries. Every case is float64: its parameters (PyTorch's own initialisation after a seeded
manual_seed, written out as `case/param/NAME`), input, optional initial states, outputs, states, and the
gradients of the loss sum(output * w_output) + sum(h_n * w_h_n) (+ sum(c_n * w_c_n)) with respect to the input
(`grad_input`), the initial states (`grad_h0`, `grad_c0`) and every parameter (`case/grad/NAME`).
Kinds: 0 RNN tanh, 1 RNN relu, 2 LSTM, 3 GRU, 4 RNNCell tanh, 5 RNNCell relu, 6 LSTMCell, 7 GRUCell.
"""
import os

import torch


def fmt_tensor(key, t):
    t = torch.as_tensor(t).detach().to(torch.float64)
    shape = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    return f"{key} {shape} {values}".rstrip() + "\n"


def scalar(v):
    return torch.tensor(float(v), dtype=torch.float64)


LAYERS = {0: "RNN", 1: "RNN", 2: "LSTM", 3: "GRU"}
CELLS = {4: "RNNCell", 5: "RNNCell", 6: "LSTMCell", 7: "GRUCell"}

# name, kind, input_size, hidden_size, num_layers, bias, batch_first, bidirectional, proj_size, states, unbatched
CASES = [
    ("rnn_tanh", 0, 3, 4, 1, True, False, False, 0, False, False),
    ("rnn_relu_2l_bidir_h0", 1, 3, 4, 2, True, False, True, 0, True, False),
    ("rnn_tanh_bf_nobias", 0, 2, 3, 2, False, True, False, 0, True, False),
    ("rnn_unbatched", 0, 3, 2, 1, True, False, True, 0, True, True),
    ("lstm", 2, 3, 4, 1, True, False, False, 0, False, False),
    ("lstm_h0c0", 2, 3, 4, 1, True, False, False, 0, True, False),
    ("lstm_2l_bidir", 2, 3, 4, 2, True, False, True, 0, True, False),
    ("lstm_bf_bidir", 2, 2, 3, 1, True, True, True, 0, False, False),
    ("lstm_3l_bf_nobias", 2, 4, 3, 3, False, True, False, 0, True, False),
    ("lstm_proj", 2, 3, 5, 1, True, False, False, 2, True, False),
    ("lstm_proj_2l_bidir_bf", 2, 3, 4, 2, True, True, True, 3, True, False),
    ("lstm_proj_zero_state", 2, 2, 4, 2, True, False, False, 1, False, False),
    ("lstm_unbatched", 2, 3, 4, 2, True, False, True, 0, True, True),
    ("lstm_unbatched_proj", 2, 3, 4, 1, True, False, False, 2, False, True),
    ("gru", 3, 3, 4, 1, True, False, False, 0, False, False),
    ("gru_h0_2l_bidir", 3, 3, 4, 2, True, False, True, 0, True, False),
    ("gru_bf_nobias", 3, 2, 5, 2, False, True, True, 0, True, False),
    ("gru_unbatched", 3, 4, 3, 1, True, False, False, 0, True, True),
    ("rnn_cell_tanh", 4, 3, 4, 1, True, False, False, 0, True, False),
    ("rnn_cell_relu_zero", 5, 3, 4, 1, True, False, False, 0, False, False),
    ("rnn_cell_unbatched", 4, 3, 2, 1, False, False, False, 0, True, True),
    ("lstm_cell", 6, 3, 4, 1, True, False, False, 0, True, False),
    ("lstm_cell_zero_nobias", 6, 2, 3, 1, False, False, False, 0, False, False),
    ("lstm_cell_unbatched", 6, 3, 4, 1, True, False, False, 0, True, True),
    ("gru_cell", 7, 3, 4, 1, True, False, False, 0, True, False),
    ("gru_cell_zero", 7, 2, 5, 1, True, False, False, 0, False, False),
    ("gru_cell_unbatched", 7, 3, 4, 1, True, False, False, 0, True, True),
]


def make_module(kind, i, h, layers, bias, batch_first, bidir, proj):
    if kind in LAYERS:
        kw = dict(num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidir)
        if kind == 2:
            return torch.nn.LSTM(i, h, proj_size=proj, **kw)
        if kind == 3:
            return torch.nn.GRU(i, h, **kw)
        return torch.nn.RNN(i, h, nonlinearity="relu" if kind == 1 else "tanh", **kw)
    if kind == 6:
        return torch.nn.LSTMCell(i, h, bias=bias)
    if kind == 7:
        return torch.nn.GRUCell(i, h, bias=bias)
    return torch.nn.RNNCell(i, h, bias=bias, nonlinearity="relu" if kind == 5 else "tanh")


def write_case(lines, index, case):
    name, kind, i, h, layers, bias, batch_first, bidir, proj, states, unbatched = case
    torch.manual_seed(1000 + index)
    m = make_module(kind, i, h, layers, bias, batch_first, bidir, proj).double()
    for key, v in [("kind", kind), ("input_size", i), ("hidden_size", h), ("num_layers", layers), ("bias", bias),
                   ("batch_first", batch_first), ("bidirectional", bidir), ("proj_size", proj),
                   ("states", states), ("unbatched", unbatched)]:
        lines.append(fmt_tensor(f"{name}/{key}", scalar(v)))
    for pname, p in m.named_parameters():
        lines.append(fmt_tensor(f"{name}/param/{pname}", p))
    T, B = 5, 3
    d = 2 if bidir else 1
    out_h = proj if proj > 0 else h
    cell = kind in CELLS
    if cell:
        shape = (i,) if unbatched else (B, i)
    else:
        shape = (T, i) if unbatched else ((B, T, i) if batch_first else (T, B, i))
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    lines.append(fmt_tensor(f"{name}/input", x))
    sb = () if unbatched else (B,)
    hshape = sb + (h,) if cell else (layers * d,) + sb + (out_h,)
    cshape = sb + (h,) if cell else (layers * d,) + sb + (h,)
    h0 = c0 = None
    if states:
        h0 = torch.randn(hshape, dtype=torch.float64, requires_grad=True)
        lines.append(fmt_tensor(f"{name}/h0", h0))
        if kind in (2, 6):
            c0 = torch.randn(cshape, dtype=torch.float64, requires_grad=True)
            lines.append(fmt_tensor(f"{name}/c0", c0))
    if kind == 2:
        out, (hn, cn) = m(x, (h0, c0)) if states else m(x)
    elif kind in LAYERS:
        out, hn = m(x, h0) if states else m(x)
        cn = None
    elif kind == 6:
        hn, cn = m(x, (h0, c0)) if states else m(x)
        out = None
    else:
        hn = m(x, h0) if states else m(x)
        out = cn = None
    loss = 0
    for field, t in [("output", out), ("h_n", hn), ("c_n", cn)]:
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


def write_trained_lstm(lines, data):
    """A float32 LSTM(4, 6, num_layers=2, batch_first) trained by SGD for 5 steps to fit a random target."""
    torch.manual_seed(7)
    m = torch.nn.LSTM(4, 6, num_layers=2, batch_first=True)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(2, 5, 4)
    target = torch.randn(2, 5, 6)
    for _ in range(5):
        opt.zero_grad()
        out, _ = m(x)
        torch.nn.functional.mse_loss(out, target).backward()
        opt.step()
    torch.save(m.state_dict(), os.path.join(data, "rnn_lstm_trained.pt"))
    test = torch.randn(3, 7, 4)
    with torch.no_grad():
        out, (hn, cn) = m(test)
    for field, t in [("input", test), ("output", out), ("h_n", hn), ("c_n", cn)]:
        lines.append(fmt_tensor(f"trained_lstm/{field}", t))


def main():
    torch.set_default_dtype(torch.float64)
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    lines = ["# PyTorch " + torch.__version__ + " reference for test_rnn.cpp (tests/reference/make_rnn_reference.py)\n"]
    for index, case in enumerate(CASES):
        write_case(lines, index, case)
    torch.set_default_dtype(torch.float32)
    write_trained_lstm(lines, data)
    with open(os.path.join(data, "rnn_reference.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
