#!/usr/bin/python3
"""Writes tests/data/attention_layers_reference.txt: PyTorch's numbers for test_multihead_attention.cpp and
test_transformer.cpp.

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_attention_layers_reference.py

Format (as rnn_reference.txt): one entry per line, `key shape values...`, shape comma-separated ("-" for 0-dim),
values Python reprs (round-trip exact doubles). Keys are `case/field`; options are 0-dim entries. Everything is
float64 with dropout 0: the parameters (PyTorch's own initialisation after a seeded manual_seed, as
`case/param/NAME` from the state_dict), the inputs, boolean masks written as 0/1 (1 = NOT allowed, PyTorch
MultiheadAttention's convention), the outputs, and the gradients of the loss sum(out * w_out) (+ sum(weights *
w_weights)) with respect to the inputs (`grad_query`, `grad_key`, `grad_value`, `grad_src`) and every parameter
(`case/grad/NAME`).
Mask kinds: attn_mask 0 none, 1 bool [L, S], 2 float [L, S], 3 bool [B*H, L, S], 4 float [B*H, L, S],
5 causal (generate_square_subsequent_mask); key_padding_mask 0 none, 1 bool, 2 float.
"""
import os
import random

import torch


def fmt_tensor(key, t):
    t = torch.as_tensor(t).detach().to(torch.float64)
    shape = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    return f"{key} {shape} {values}".rstrip() + "\n"


def scalar(v):
    return torch.tensor(float(v), dtype=torch.float64)


def make_attn_mask(kind, L, S, BH):
    if kind == 0:
        return None
    if kind == 5:
        return torch.nn.Transformer.generate_square_subsequent_mask(L).to(torch.float64)
    shape = (L, S) if kind in (1, 2) else (BH, L, S)
    if kind in (1, 3):
        m = torch.rand(shape) < 0.3
        m[..., 0] = False  # every query keeps a key
        return m
    return torch.randn(shape, dtype=torch.float64)


def make_padding_mask(kind, B, S, unbatched):
    if kind == 0:
        return None
    shape = (S,) if unbatched else (B, S)
    if kind == 1:
        m = torch.rand(shape) < 0.3
        m[..., 0] = False
        return m
    return torch.randn(shape, dtype=torch.float64)


def write_mha_case(lines, name, seed, o):
    torch.manual_seed(seed)
    E, H = o["embed_dim"], o["num_heads"]
    kdim, vdim = o.get("kdim", E), o.get("vdim", E)
    m = torch.nn.MultiheadAttention(E, H, bias=o["bias"], add_bias_kv=o["add_bias_kv"],
                                    add_zero_attn=o["add_zero_attn"], kdim=kdim, vdim=vdim,
                                    batch_first=o["batch_first"]).double()
    for key in ["embed_dim", "num_heads", "bias", "add_bias_kv", "add_zero_attn", "batch_first", "need_weights",
                "average", "unbatched", "attn_mask", "key_padding_mask", "self_attention"]:
        lines.append(fmt_tensor(f"{name}/{key}", scalar(o[key])))
    lines.append(fmt_tensor(f"{name}/kdim", scalar(kdim)))
    lines.append(fmt_tensor(f"{name}/vdim", scalar(vdim)))
    for pname, p in m.state_dict().items():
        lines.append(fmt_tensor(f"{name}/param/{pname}", p))
    L, S, B = o["L"], o["S"], o["B"]
    unbatched = o["unbatched"]

    def shape(length, features):
        if unbatched:
            return (length, features)
        return (B, length, features) if o["batch_first"] else (length, B, features)

    query = torch.randn(shape(L, E), dtype=torch.float64, requires_grad=True)
    if o["self_attention"]:
        key = value = query
        S = L
    else:
        key = torch.randn(shape(S, kdim), dtype=torch.float64, requires_grad=True)
        value = torch.randn(shape(S, vdim), dtype=torch.float64, requires_grad=True)
    Bm = 1 if unbatched else B
    attn_mask = make_attn_mask(o["attn_mask"], L, S, Bm * H)
    kpm = make_padding_mask(o["key_padding_mask"], B, S, unbatched)
    lines.append(fmt_tensor(f"{name}/query", query))
    if not o["self_attention"]:
        lines.append(fmt_tensor(f"{name}/key", key))
        lines.append(fmt_tensor(f"{name}/value", value))
    if attn_mask is not None:
        lines.append(fmt_tensor(f"{name}/attn_mask_values", attn_mask))
    if kpm is not None:
        lines.append(fmt_tensor(f"{name}/key_padding_mask_values", kpm))
    out, weights = m(query, key, value, key_padding_mask=kpm, need_weights=o["need_weights"], attn_mask=attn_mask,
                     average_attn_weights=o["average"])
    w_out = torch.randn(out.shape, dtype=torch.float64)
    lines.append(fmt_tensor(f"{name}/output", out))
    lines.append(fmt_tensor(f"{name}/w_output", w_out))
    loss = (out * w_out).sum()
    if weights is not None:
        w_weights = torch.randn(weights.shape, dtype=torch.float64)
        lines.append(fmt_tensor(f"{name}/weights", weights))
        lines.append(fmt_tensor(f"{name}/w_weights", w_weights))
        loss = loss + (weights * w_weights).sum()
    inputs = [query] if o["self_attention"] else [query, key, value]
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad(loss, inputs + list(m.parameters()))
    for field, g in zip(["grad_query", "grad_key", "grad_value"], grads[:len(inputs)]):
        lines.append(fmt_tensor(f"{name}/{field}", g))
    for pname, g in zip(names, grads[len(inputs):]):
        lines.append(fmt_tensor(f"{name}/grad/{pname}", g))


def mha_cases():
    base = dict(embed_dim=6, num_heads=2, bias=True, add_bias_kv=False, add_zero_attn=False, batch_first=False,
                need_weights=True, average=True, unbatched=False, attn_mask=0, key_padding_mask=0,
                self_attention=False, L=4, S=5, B=3)
    cases = [
        ("mha_plain", {}),
        ("mha_self", dict(self_attention=True)),
        ("mha_no_weights", dict(need_weights=False)),
        ("mha_heads_weights", dict(average=False, num_heads=3)),
        ("mha_batch_first", dict(batch_first=True, attn_mask=2)),
        ("mha_kdim_vdim", dict(kdim=4, vdim=5, key_padding_mask=1)),
        ("mha_kdim_vdim_no_weights", dict(kdim=3, vdim=7, need_weights=False, attn_mask=1)),
        ("mha_bias_kv", dict(add_bias_kv=True, attn_mask=1, key_padding_mask=1)),
        ("mha_zero_attn", dict(add_zero_attn=True, attn_mask=4, key_padding_mask=1)),
        ("mha_bias_kv_zero_attn", dict(add_bias_kv=True, add_zero_attn=True, need_weights=False, attn_mask=3)),
        ("mha_no_bias", dict(bias=False, attn_mask=3, average=False)),
        ("mha_float_kpm", dict(key_padding_mask=2, need_weights=False)),
        ("mha_unbatched", dict(unbatched=True, attn_mask=1, key_padding_mask=1)),
        ("mha_unbatched_3d_mask", dict(unbatched=True, attn_mask=4, average=False, batch_first=True)),
        ("mha_unbatched_no_weights", dict(unbatched=True, need_weights=False, attn_mask=2, key_padding_mask=2)),
        ("mha_causal_self_bf", dict(self_attention=True, batch_first=True, attn_mask=5, key_padding_mask=1)),
    ]
    # A sampled grid over the remaining combinations.
    rng = random.Random(38)
    for i in range(8):
        o = dict(add_bias_kv=rng.random() < 0.5, add_zero_attn=rng.random() < 0.5, batch_first=rng.random() < 0.5,
                 need_weights=rng.random() < 0.6, average=rng.random() < 0.5, unbatched=rng.random() < 0.25,
                 attn_mask=rng.randrange(5), key_padding_mask=rng.randrange(3), bias=rng.random() < 0.8,
                 num_heads=rng.choice([1, 2, 3]), L=rng.randrange(1, 5), S=rng.randrange(1, 6), B=rng.randrange(1, 4))
        if rng.random() < 0.3:
            o["kdim"], o["vdim"] = rng.randrange(1, 6), rng.randrange(1, 6)
        cases.append((f"mha_grid{i}", o))
    for name, extra in cases:
        o = dict(base)
        o.update(extra)
        if o["attn_mask"] != 0 and o["key_padding_mask"] == 2:
            # PyTorch 1.13 fails (float attn_mask) or reads the float padding mask as boolean (bool attn_mask).
            o["key_padding_mask"] = 1
        yield name, o


def write_encoder_case(lines, name, seed, o):
    torch.manual_seed(seed)
    d, H = o["d_model"], o["nhead"]
    layer = torch.nn.TransformerEncoderLayer(d, H, dim_feedforward=o["dim_feedforward"], dropout=0.0,
                                             activation=o["activation"], layer_norm_eps=o["eps"],
                                             batch_first=o["batch_first"], norm_first=o["norm_first"]).double()
    if o["num_layers"] > 0:
        norm = torch.nn.LayerNorm(d, eps=o["eps"]).double() if o["final_norm"] else None
        m = torch.nn.TransformerEncoder(layer, o["num_layers"], norm=norm, enable_nested_tensor=False).double()
        # Note: the layers start as deep copies of `layer`; perturb them so that a wrong copy shows.
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.1 * torch.randn(p.shape, dtype=torch.float64))
    else:
        m = layer
    for key in ["d_model", "nhead", "dim_feedforward", "norm_first", "batch_first", "num_layers", "final_norm",
                "src_mask", "key_padding_mask", "eps"]:
        lines.append(fmt_tensor(f"{name}/{key}", scalar(o[key])))
    lines.append(fmt_tensor(f"{name}/gelu", scalar(o["activation"] == "gelu")))
    for pname, p in m.state_dict().items():
        lines.append(fmt_tensor(f"{name}/param/{pname}", p))
    L, B = o["L"], o["B"]
    shape = (B, L, d) if o["batch_first"] else (L, B, d)
    src = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    mask = make_attn_mask(o["src_mask"], L, L, B * H)
    kpm = make_padding_mask(o["key_padding_mask"], B, L, False)
    lines.append(fmt_tensor(f"{name}/src", src))
    if mask is not None:
        lines.append(fmt_tensor(f"{name}/attn_mask_values", mask))
    if kpm is not None:
        lines.append(fmt_tensor(f"{name}/key_padding_mask_values", kpm))
    if o["num_layers"] > 0:
        out = m(src, mask=mask, src_key_padding_mask=kpm)
    else:
        out = m(src, src_mask=mask, src_key_padding_mask=kpm)
    w_out = torch.randn(out.shape, dtype=torch.float64)
    lines.append(fmt_tensor(f"{name}/output", out))
    lines.append(fmt_tensor(f"{name}/w_output", w_out))
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad((out * w_out).sum(), [src] + list(m.parameters()))
    lines.append(fmt_tensor(f"{name}/grad_src", grads[0]))
    for pname, g in zip(names, grads[1:]):
        lines.append(fmt_tensor(f"{name}/grad/{pname}", g))


def encoder_cases():
    base = dict(d_model=8, nhead=2, dim_feedforward=16, activation="relu", eps=1e-5, batch_first=False,
                norm_first=False, num_layers=0, final_norm=False, src_mask=0, key_padding_mask=0, L=5, B=3)
    cases = [
        ("enc_layer", {}),
        ("enc_layer_gelu_norm_first", dict(activation="gelu", norm_first=True, src_mask=5)),
        ("enc_layer_bf_masks", dict(batch_first=True, src_mask=1, key_padding_mask=1, eps=1e-3)),
        ("enc_layer_float_masks", dict(src_mask=4, key_padding_mask=1, nhead=4)),
        ("enc_layer_float_padding", dict(key_padding_mask=2, activation="gelu")),
        ("enc_stack", dict(num_layers=2, src_mask=5)),
        ("enc_stack_norm_bf", dict(num_layers=3, final_norm=True, batch_first=True, norm_first=True,
                                   activation="gelu", key_padding_mask=1)),
    ]
    for name, extra in cases:
        o = dict(base)
        o.update(extra)
        yield name, o


def write_decoder_case(lines, name, seed, o):
    """Decoder layer (num_layers 0), decoder stack, or a whole nn.Transformer (transformer 1)."""
    torch.manual_seed(seed)
    d, H = o["d_model"], o["nhead"]
    kw = dict(dim_feedforward=o["dim_feedforward"], dropout=0.0, activation=o["activation"], layer_norm_eps=o["eps"],
              batch_first=o["batch_first"], norm_first=o["norm_first"])
    if o["transformer"]:
        m = torch.nn.Transformer(d, H, num_encoder_layers=o["num_layers"], num_decoder_layers=o["num_layers"],
                                 **kw).double()
    else:
        layer = torch.nn.TransformerDecoderLayer(d, H, **kw).double()
        if o["num_layers"] > 0:
            norm = torch.nn.LayerNorm(d, eps=o["eps"]).double() if o["final_norm"] else None
            m = torch.nn.TransformerDecoder(layer, o["num_layers"], norm=norm).double()
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(0.1 * torch.randn(p.shape, dtype=torch.float64))
        else:
            m = layer
    for key in ["d_model", "nhead", "dim_feedforward", "norm_first", "batch_first", "num_layers", "final_norm",
                "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask", "eps", "transformer"]:
        lines.append(fmt_tensor(f"{name}/{key}", scalar(o[key])))
    lines.append(fmt_tensor(f"{name}/gelu", scalar(o["activation"] == "gelu")))
    for pname, p in m.state_dict().items():
        lines.append(fmt_tensor(f"{name}/param/{pname}", p))
    T, S, B = o["T"], o["S"], o["B"]
    shape = (lambda n: (B, n, d)) if o["batch_first"] else (lambda n: (n, B, d))
    tgt = torch.randn(shape(T), dtype=torch.float64, requires_grad=True)
    memory = torch.randn(shape(S), dtype=torch.float64, requires_grad=True)
    masks = dict(tgt_mask=make_attn_mask(o["tgt_mask"], T, T, B * H),
                 memory_mask=make_attn_mask(o["memory_mask"], T, S, B * H),
                 tgt_key_padding_mask=make_padding_mask(o["tgt_key_padding_mask"], B, T, False),
                 memory_key_padding_mask=make_padding_mask(o["memory_key_padding_mask"], B, S, False))
    lines.append(fmt_tensor(f"{name}/tgt", tgt))
    lines.append(fmt_tensor(f"{name}/memory", memory))
    for key, t in masks.items():
        if t is not None:
            lines.append(fmt_tensor(f"{name}/{key}_values", t))
    if o["transformer"]:
        # memory is the source sequence here; src_mask is left out (the encoder's masks are tested above).
        out = m(memory, tgt, **masks)
    else:
        out = m(tgt, memory, **masks)
    w_out = torch.randn(out.shape, dtype=torch.float64)
    lines.append(fmt_tensor(f"{name}/output", out))
    lines.append(fmt_tensor(f"{name}/w_output", w_out))
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad((out * w_out).sum(), [tgt, memory] + list(m.parameters()))
    lines.append(fmt_tensor(f"{name}/grad_tgt", grads[0]))
    lines.append(fmt_tensor(f"{name}/grad_memory", grads[1]))
    for pname, g in zip(names, grads[2:]):
        lines.append(fmt_tensor(f"{name}/grad/{pname}", g))


def decoder_cases():
    base = dict(d_model=8, nhead=2, dim_feedforward=16, activation="relu", eps=1e-5, batch_first=False,
                norm_first=False, num_layers=0, final_norm=False, tgt_mask=0, memory_mask=0, tgt_key_padding_mask=0,
                memory_key_padding_mask=0, transformer=False, T=4, S=5, B=3)
    cases = [
        ("dec_layer", {}),
        ("dec_layer_gelu_norm_first_masks", dict(activation="gelu", norm_first=True, tgt_mask=5, memory_mask=1,
                                                 memory_key_padding_mask=1)),
        ("dec_layer_bf_float_masks", dict(batch_first=True, tgt_mask=4, memory_mask=2, tgt_key_padding_mask=1)),
        ("dec_stack_norm", dict(num_layers=2, final_norm=True, tgt_mask=5, memory_key_padding_mask=2)),
        ("transformer", dict(transformer=True, num_layers=2, tgt_mask=5, memory_key_padding_mask=1)),
        ("transformer_bf_norm_first", dict(transformer=True, num_layers=1, batch_first=True, norm_first=True,
                                           activation="gelu", tgt_mask=5)),
    ]
    for name, extra in cases:
        o = dict(base)
        o.update(extra)
        yield name, o


def main():
    torch.set_default_dtype(torch.float64)
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    lines = ["# PyTorch " + torch.__version__ + " reference for test_multihead_attention.cpp and test_transformer.cpp"
             " (tests/reference/make_attention_layers_reference.py)\n"]
    for index, (name, o) in enumerate(mha_cases()):
        write_mha_case(lines, name, 3800 + index, o)
    for index, (name, o) in enumerate(encoder_cases()):
        write_encoder_case(lines, name, 3900 + index, o)
    for index, (name, o) in enumerate(decoder_cases()):
        write_decoder_case(lines, name, 4000 + index, o)
    lines.append(fmt_tensor("square_subsequent_mask_4", torch.nn.Transformer.generate_square_subsequent_mask(4)))
    with open(os.path.join(data, "attention_layers_reference.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
