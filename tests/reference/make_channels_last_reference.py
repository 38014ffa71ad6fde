#!/usr/bin/python3
"""Writes tests/data/channels_last_reference.txt: PyTorch 1.13's memory-format rules for test_channels_last_ops.cpp.

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_channels_last_reference.py

Format (as the other reference files): one entry per line, `key shape values...`.
- `layout/K/sizes`, `layout/K/strides`: a 4-d (or 3-d/5-d) layout made with torch.empty_strided;
  `layout/K/answer`: [is_contiguous(), is_contiguous(channels_last), suggest_memory_format() == channels_last].
- `binary/K/answer`: for `x OP y` with x and y in the formats and shapes named by the key (see BINARY_CASES), the
  output's [is_contiguous(), is_contiguous(channels_last)], and the same for the gradients of x and y (from
  backward of sum(out * w)), each as [contiguous, channels_last].
- `grad/param/answer`: a channels-last leaf w used by a row-major and a channels-last op: w.grad's
  [is_contiguous(), is_contiguous(channels_last)]; `grad/accum/answer`: the same after a second backward.
- `unary/answer`: relu/sigmoid/mul-by-scalar/dropout of a channels-last input: [contiguous, channels_last] each.
- `pool/answer`: max_pool2d, avg_pool2d, adaptive_avg_pool2d of a channels-last input and their input gradients.
- `misc/answer`: empty_like, zeros_like, clone, to(float64) of a channels-last tensor: channels_last each.
"""
import os

import torch

CL = torch.channels_last


def fmt_tensor(key, values, shape=None):
    t = torch.as_tensor(values, dtype=torch.float64)
    if shape is not None:
        t = t.reshape(shape)
    shape_text = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    return f"{key} {shape_text} " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist()) + "\n"


def suggested_channels_last(t):
    """1 when C++'s Tensor::suggest_memory_format() is ChannelsLast, 0 when Contiguous, -1 when this probe cannot
    tell. Python does not expose it, so the probe reads it from an op that allocates its output with it: CPU
    adaptive_avg_pool2d (output.resize_(..., input.suggest_memory_format())) at the input's own size. Where the
    channels-last and row-major strides of the shape are equal the probe cannot tell (-1)."""
    if t.dim() != 4 or t.numel() == 0:
        return 0.0 if t.dim() != 4 else -1.0
    n, c, h, w = t.shape
    o = torch._C._nn.adaptive_avg_pool2d(t, (h, w))
    cl_strides, rm_strides = dense_cl(list(o.shape)), [c * h * w, h * w, w, 1]
    got = list(o.stride())
    if cl_strides == rm_strides:
        return -1.0
    if got == cl_strides:
        return 1.0
    if got == rm_strides:
        return 0.0
    raise RuntimeError(f"adaptive_avg_pool2d gave strides {got} for {list(t.shape)}")


def dense_cl(sizes):
    n, c, h, w = sizes
    return [h * w * c, 1, w * c, c]


# (sizes, strides) pairs: dense row-major and channels-last layouts for shapes with size-1 and size-0 dims, views
# (permutes and slices), expanded dims, and the ambiguous cases PyTorch's comments name.
LAYOUTS = []
for sizes in ([2, 3, 4, 5], [2, 1, 4, 5], [2, 3, 1, 1], [1, 3, 4, 5], [1, 1, 1, 1], [2, 1, 1, 1], [1, 3, 1, 1],
              [2, 3, 1, 5], [2, 3, 4, 1], [1, 1, 4, 5], [0, 3, 4, 5], [2, 0, 4, 5], [1, 3, 1, 5]):
    n, c, h, w = sizes
    LAYOUTS.append((sizes, [c * h * w, h * w, w, 1]))
    LAYOUTS.append((sizes, dense_cl(sizes)))
LAYOUTS += [
    ([2, 3, 4, 5], [60, 1, 15, 3]),      # NHWC strides (= dense_cl)
    ([2, 3, 4, 5], [120, 1, 30, 3]),     # NHWC with a gap between images (sliced N of a bigger batch? no: stride 120)
    ([2, 3, 4, 5], [60, 1, 30, 3]),      # NHWC of a W=10 tensor sliced to 5 (step 2 along W)
    ([2, 3, 4, 5], [80, 1, 20, 4]),      # NHWC of C=4 sliced to 3 channels
    ([2, 3, 4, 5], [60, 20, 1, 4]),      # NCWH transposed (H and W swapped)
    ([2, 3, 4, 5], [1, 2, 30, 6]),       # batch innermost
    ([2, 3, 4, 5], [0, 1, 15, 3]),       # N expanded
    ([2, 3, 4, 5], [60, 0, 15, 3]),      # C expanded
    ([2, 3, 4, 5], [0, 0, 0, 0]),        # all expanded
    ([2, 1, 1, 1], [1, 1, 1, 1]),        # N111 with identical strides (ambiguous)
    ([3, 1, 1, 1], [5, 5, 5, 5]),        # N11W sliced on W
    ([1, 3, 4, 1], [12, 1, 3, 3]),       # 1CH1 channels-last
    ([1, 3, 4, 1], [12, 4, 1, 1]),       # 1CH1 row-major
    ([2, 1, 4, 1], [4, 1, 1, 1]),        # N1H1 channels-last
    ([2, 1, 4, 1], [4, 4, 1, 1]),        # N1H1 contiguous
    ([1, 3, 1, 4], [12, 4, 4, 1]),       # 1C1W
    ([1, 4, 1, 3], [12, 1, 4, 4]),       # 1C1W transposed(1,3)
    ([2, 3, 4], [12, 4, 1]),             # 3-d: never channels-last
    ([2, 3, 4, 5, 6], [360, 1, 90, 18, 3]),  # 5-d channels_last_3d layout: not ChannelsLast (2d)
]

# Binary cases: (name, x shape, x format, y shape, y format); format 'r' row-major, 'c' channels-last.
BINARY_CASES = [
    ("cl_cl", [2, 3, 4, 5], "c", [2, 3, 4, 5], "c"),
    ("cl_rm", [2, 3, 4, 5], "c", [2, 3, 4, 5], "r"),
    ("rm_cl", [2, 3, 4, 5], "r", [2, 3, 4, 5], "c"),
    ("cl_bias", [2, 3, 4, 5], "c", [1, 3, 1, 1], "r"),
    ("bias_cl", [1, 3, 1, 1], "r", [2, 3, 4, 5], "c"),
    ("cl_c", [2, 3, 4, 5], "c", [3, 1, 1], "r"),
    ("cl_w", [2, 3, 4, 5], "c", [5], "r"),
    ("rm_scalar0d", [2, 3, 4, 5], "c", [], "r"),
    ("cl_cl_bcastN", [2, 3, 4, 5], "c", [1, 3, 4, 5], "c"),
    ("rm_bcastN_cl", [1, 3, 4, 5], "r", [2, 3, 4, 5], "c"),
]
BINARY_OPS = ["add", "sub", "mul", "div"]  # tapegrad has no maximum op


def make(shape, fmt, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
    if fmt == "c":
        t = t.contiguous(memory_format=CL)
    return t.requires_grad_()


def fmt_pair(t):
    return [float(t.is_contiguous()), float(t.dim() == 4 and t.is_contiguous(memory_format=CL))]


def main():
    out = [f"# torch {torch.__version__}\n"]
    for k, (sizes, strides) in enumerate(LAYOUTS):
        t = torch.empty_strided(sizes, strides)
        cl = t.dim() == 4 and t.is_contiguous(memory_format=CL)
        answer = [float(t.is_contiguous()), float(cl), suggested_channels_last(t)]
        out.append(fmt_tensor(f"layout/{k}/sizes", sizes))
        out.append(fmt_tensor(f"layout/{k}/strides", strides))
        out.append(fmt_tensor(f"layout/{k}/answer", answer))
    for name, xs, xf, ys, yf in BINARY_CASES:
        for op in BINARY_OPS:
            x, y = make(xs, xf, 1), make(ys, yf, 2)
            o = getattr(torch, op)(x, y)
            w = torch.rand(o.shape, dtype=torch.float64)
            (o * w).sum().backward()
            out.append(fmt_tensor(f"binary/{name}/{op}/answer", fmt_pair(o) + fmt_pair(x.grad) + fmt_pair(y.grad)))
    # In place: x_rm.add_(y_cl) keeps x's layout (trivially); x_cl.add_(y_rm) keeps channels-last.
    x = make([2, 3, 4, 5], "c", 3).detach()
    x.add_(make([2, 3, 4, 5], "r", 4).detach())
    out.append(fmt_tensor("inplace/cl_add_rm/answer", fmt_pair(x)))
    # A channels-last leaf used by a channels-last op and a row-major op: the format of .grad.
    for name, uses in (("param_cl_only", "c"), ("param_mixed", "cr"), ("param_rm_only", "r")):
        w = make([2, 3, 4, 5], "c", 5)
        loss = 0
        for u in uses:
            loss = loss + ((w * 2) if u == "c" else (w.contiguous() * 3)).sum()
        loss.backward()
        first = fmt_pair(w.grad)
        (w * w).sum().backward()
        out.append(fmt_tensor(f"grad/{name}/answer", first + fmt_pair(w.grad)))
    x = make([2, 3, 6, 6], "c", 6)
    unary = []
    for f in (torch.relu, torch.sigmoid, torch.tanh, lambda t: t * 2.5, lambda t: t + 1, torch.exp,
              lambda t: torch.nn.functional.dropout(t, 0.5, True), lambda t: torch.nn.functional.gelu(t),
              lambda t: torch.nn.functional.leaky_relu(t, 0.1), lambda t: t.clamp(0.6, 1.2)):
        o = f(x)
        unary += fmt_pair(o)
    out.append(fmt_tensor("unary/answer", unary))
    pool = []
    for f in (lambda t: torch.nn.functional.max_pool2d(t, 2), lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1),
              lambda t: torch.nn.functional.avg_pool2d(t, 2), lambda t: torch.nn.functional.avg_pool2d(t, 3, 2, 1),
              lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 1),
              lambda t: torch.nn.functional.adaptive_avg_pool2d(t, (4, 3))):
        x.grad = None
        o = f(x)
        o.sum().backward()
        pool += fmt_pair(o) + fmt_pair(x.grad)
    out.append(fmt_tensor("pool/answer", pool))
    xd = x.detach()
    misc = [torch.empty_like(xd), torch.zeros_like(xd), torch.ones_like(xd), xd.clone(), xd.to(torch.float32),
            xd.contiguous(), torch.cat([xd, xd], 1), xd.sum(1, keepdim=True), xd.permute(0, 1, 3, 2)]
    out.append(fmt_tensor("misc/answer", [v for t in misc for v in fmt_pair(t)]))
    try:
        xd.view(2, -1)
        out.append(fmt_tensor("misc/view_flat_ok", [1.0]))
    except RuntimeError:
        out.append(fmt_tensor("misc/view_flat_ok", [0.0]))
    out.append(fmt_tensor("misc/reshape_flat_is_view", [float(xd.reshape(2, -1)._base is not None)]))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "channels_last_reference.txt")
    with open(path, "w") as f:
        f.writelines(out)


if __name__ == "__main__":
    main()
