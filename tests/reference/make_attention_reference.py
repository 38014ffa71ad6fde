#!/usr/bin/python3
"""Writes tests/data/attention_reference.txt: PyTorch's scaled dot-product attention numbers for
tests/test_attention.cpp.

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_attention_reference.py

torch 1.13 has no public F.scaled_dot_product_attention, so the reference is PyTorch 2.x's math definition,
softmax(q @ k^T / sqrt(E) + mask) @ v, in torch float64; a keep-mask (torch 2.x's bool attn_mask) is applied
as masked_fill(~keep, -inf) and is_causal as the keep-mask ones(L, S).tril(). Where torch 1.13's private
F._scaled_dot_product_attention (MultiheadAttention's internal path) takes the case (no mask, additive mask,
both without broadcast batch dims), the script also checks that it gives the same output.

Format (as layers_reference.txt): one entry per line, `key shape values...`, where shape is comma-separated
extents and values are Python reprs (round-trip exact doubles). Per case: `case/q`, `case/k`, `case/v`, the
mask `case/mask` (additive values, or 0/1 for a keep-mask), `case/upstream` (the weights W of the scalar
sum(out * W) that is differentiated), `case/out`, and `case/grad_q`, `case/grad_k`, `case/grad_v`,
`case/grad_mask` (additive masks only).
For the float32 large-score cases `f32/FORM/SCALE/*` (see float32_lines): `x32` entries are the float32 inputs (exact as doubles),
`torch32_out` and `torch32_grad_*` PyTorch's float32 results, `exact_out` and `exact_grad_*` float64 results
on the same float32-rounded inputs.
"""
import math
import os

import torch
import torch.nn.functional as F


def fmt_tensor(key, t):
    t = torch.as_tensor(t).detach()
    shape = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    return f"{key} {shape} {values}".rstrip() + "\n"


def attention(q, k, v, mask=None, keep=None, is_causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores + mask
    return torch.softmax(scores, -1) @ v


# name, q shape, k shape, v shape, mask kind (None, "additive", "keep", "causal"), mask shape
CASES = [
    ("plain", (2, 3, 4), (2, 5, 4), (2, 5, 6), None, None),
    ("additive", (2, 3, 4), (2, 5, 4), (2, 5, 6), "additive", (3, 5)),
    ("additive_full", (2, 2, 3, 2), (2, 2, 4, 2), (2, 2, 4, 3), "additive", (2, 2, 3, 4)),
    ("keep_padding", (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 2), "keep", (2, 1, 1, 5)),
    ("causal", (2, 4, 3), (2, 6, 3), (2, 6, 2), "causal", None),
    ("causal_square", (1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), "causal", None),
    ("broadcast", (2, 3, 3, 4), (2, 1, 5, 4), (5, 3), None, None),
    ("broadcast_mask", (3, 2, 4), (1, 3, 4), (3, 3, 5), "additive", (3, 1, 3)),
    ("unbatched", (3, 4), (5, 4), (5, 2), None, None),
]


def case_lines(name, q_shape, k_shape, v_shape, kind, mask_shape, generator):
    q = torch.randn(q_shape, dtype=torch.float64, generator=generator).requires_grad_(True)
    k = torch.randn(k_shape, dtype=torch.float64, generator=generator).requires_grad_(True)
    v = torch.randn(v_shape, dtype=torch.float64, generator=generator).requires_grad_(True)
    mask = keep = None
    lines = [fmt_tensor(f"{name}/q", q), fmt_tensor(f"{name}/k", k), fmt_tensor(f"{name}/v", v)]
    if kind == "additive":
        mask = torch.randn(mask_shape, dtype=torch.float64, generator=generator).requires_grad_(True)
        lines.append(fmt_tensor(f"{name}/mask", mask))
    elif kind == "keep":
        keep = torch.rand(mask_shape, generator=generator) > 0.35
        keep[..., 0] = True  # no fully excluded row: its NaN is tested apart
        lines.append(fmt_tensor(f"{name}/mask", keep.to(torch.float64)))
    out = attention(q, k, v, mask, keep, kind == "causal")
    if kind in (None, "additive") and len(q_shape) == 3 and q_shape[:-2] == k_shape[:-2] == v_shape[:-2]:
        internal, _ = F._scaled_dot_product_attention(q, k, v, mask, 0.0, False)
        assert torch.allclose(internal, out, rtol=1e-12, atol=1e-12), name
    upstream = torch.randn(out.shape, dtype=torch.float64, generator=generator)
    (out * upstream).sum().backward()
    lines += [fmt_tensor(f"{name}/upstream", upstream), fmt_tensor(f"{name}/out", out),
              fmt_tensor(f"{name}/grad_q", q.grad), fmt_tensor(f"{name}/grad_k", k.grad),
              fmt_tensor(f"{name}/grad_v", v.grad)]
    if mask is not None:
        lines.append(fmt_tensor(f"{name}/grad_mask", mask.grad))
    return lines


def float32_lines(form, scale, generator):
    """Scores of about +-scale (form "scaled": q and k of E = 4 with entries of about sqrt(scale)), or scale plus
    O(1) differences (form "shifted": column 0 of q and k set to sqrt(2 scale), the other columns O(1))."""
    name = f"f32/{form}/{scale}"
    base = [torch.randn(s, dtype=torch.float64, generator=generator) for s in [(2, 3, 4), (2, 5, 4), (2, 5, 3)]]
    if form == "scaled":
        factor = math.sqrt(float(scale))
        q32, k32, v32 = (base[0] * factor).float(), (base[1] * factor).float(), base[2].float()
    else:
        base[0][..., 0] = math.sqrt(2 * float(scale))
        base[1][..., 0] = math.sqrt(2 * float(scale))
        q32, k32, v32 = base[0].float(), base[1].float(), base[2].float()
    upstream = torch.randn((2, 3, 3), dtype=torch.float64, generator=generator)
    lines = [fmt_tensor(f"{name}/q", q32), fmt_tensor(f"{name}/k", k32), fmt_tensor(f"{name}/v", v32),
             fmt_tensor(f"{name}/upstream", upstream)]
    for label, dtype in [("torch32", torch.float32), ("exact", torch.float64)]:
        q, k, v = (t.detach().clone().to(dtype).requires_grad_(True) for t in (q32, k32, v32))
        out = attention(q, k, v)
        (out * upstream.to(dtype)).sum().backward()
        lines += [fmt_tensor(f"{name}/{label}_out", out), fmt_tensor(f"{name}/{label}_grad_q", q.grad),
                  fmt_tensor(f"{name}/{label}_grad_k", k.grad), fmt_tensor(f"{name}/{label}_grad_v", v.grad)]
    return lines


def main():
    generator = torch.Generator().manual_seed(38)
    lines = ["# written by tests/reference/make_attention_reference.py with torch " + torch.__version__ + "\n"]
    for case in CASES:
        lines += case_lines(*case, generator)
    for form in ["scaled", "shifted"]:
        for scale in ["1", "1e2", "1e4"]:
            lines += float32_lines(form, scale, generator)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "attention_reference.txt")
    with open(path, "w") as out:
        out.writelines(lines)


if __name__ == "__main__":
    main()
