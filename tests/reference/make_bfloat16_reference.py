#!/usr/bin/python3
"""Writes torch 1.13's bfloat16 conversions and files for test_bfloat16_dtype.cpp and test_bfloat16_serialize.cpp:
  tests/data/bfloat16_reference.txt   `kind input output` lines (hex bits or Python reprs), '#' comments:
      f32 <float32 bits> <bfloat16 bits>     torch.tensor(float32).to(torch.bfloat16), bit for bit
      f64 <float64 repr> <bfloat16 bits>     float64 -> bfloat16 (torch rounds through float32)
      i64 <int64> <bfloat16 bits>            int64 -> bfloat16
      b2i <bfloat16 bits> <int64>            bfloat16 -> int64 (truncation toward zero)
  tests/data/bfloat16_tensors.pt          torch.save of {"special": bf16 [16] (NaN, -inf, subnormals, -0, ...),
                                          "grid": bf16 [3, 5] values 0.1 * k - 0.7, "wide": float32 [4]}
  tests/data/bfloat16_tensors.safetensors the same tensors in the safetensors layout (written by hand here:
                                          safetensors is a JSON header and raw little-endian bytes)
Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/make_bfloat16_reference.py
"""
import json
import os
import random
import struct

import torch

here = os.path.dirname(os.path.abspath(__file__))
data = os.path.join(here, "..", "data")
random.seed(42)


def bf16_bits(t):
    return [b & 0xFFFF for b in t.view(torch.int16).tolist()]


inputs = [random.getrandbits(32) for _ in range(3000)]
# Ties (dropped half exactly 0x8000, kept part even and odd), one above and below, around 1, huge, tiny, subnormal.
for high in [0x3F80, 0x3F81, 0x7F7F, 0x7F7E, 0x0000, 0x0001, 0x007F, 0x0080, 0x8000, 0x8001, 0xFF7F, 0x4000, 0x4001]:
    for low in [0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF]:
        inputs.append((high << 16) | low)
inputs += [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x00000001, 0x80000001,
           0x007FFFFF, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000000, 0x80000000]
# Note: from the bits, not from Python floats, so a NaN's payload and sign reach torch as they are.
values = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in inputs], dtype=torch.int32).view(torch.float32)
out_bits = bf16_bits(values.to(torch.bfloat16))

doubles = [random.uniform(-4, 4) for _ in range(200)] + [1 + 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -40,
                                                            1 + 2.0 ** -8 + 2.0 ** -30, 3.4e38, 3.5e38, 1e-45, -1e-40]
double_bits = bf16_bits(torch.tensor(doubles, dtype=torch.float64).to(torch.bfloat16))
ints = [random.randint(-(1 << 40), 1 << 40) for _ in range(100)] + [0, 1, -1, 255, 256, 257, 258, 259, 65535,
                                                                    2 ** 62 + 1, -(2 ** 63)]
int_bits = bf16_bits(torch.tensor(ints, dtype=torch.int64).to(torch.bfloat16))
b2i_in = [random.getrandbits(16) & 0xBFFF for _ in range(200)]  # exponent below 2^63: every value fits int64
b2i_in = [b for b in b2i_in if (b & 0x7F80) < 0x5F00]
b2i_out = torch.tensor([b - 65536 if b >= 32768 else b for b in b2i_in], dtype=torch.int16).view(torch.bfloat16)
b2i_out = b2i_out.to(torch.int64).tolist()

with open(os.path.join(data, "bfloat16_reference.txt"), "w") as f:
    f.write("# torch %s bfloat16 conversions; written by tests/reference/make_bfloat16_reference.py\n" % torch.__version__)
    for i, o in zip(inputs, out_bits):
        f.write("f32 %08x %04x\n" % (i, o))
    for d, o in zip(doubles, double_bits):
        f.write("f64 %r %04x\n" % (d, o))
    for i, o in zip(ints, int_bits):
        f.write("i64 %d %04x\n" % (i, o))
    for b, o in zip(b2i_in, b2i_out):
        f.write("b2i %04x %d\n" % (b, o))

special_bits = [0x7FC0, 0xFFC0, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x007F, 0x0080, 0x8000, 0x0000, 0x3F80, 0xBF80,
                0x7F7F, 0xFF7F, 0x4049, 0x7FA0]
special = torch.tensor([b - 65536 if b >= 32768 else b for b in special_bits], dtype=torch.int16).view(torch.bfloat16)
grid = (0.1 * torch.arange(15, dtype=torch.float64) - 0.7).to(torch.bfloat16).reshape(3, 5)
wide = torch.tensor([1.5, -2.25, 3.0e-3, 7.0], dtype=torch.float32)
tensors = {"special": special, "grid": grid, "wide": wide}
torch.save(tensors, os.path.join(data, "bfloat16_tensors.pt"), _use_new_zipfile_serialization=True)

codes = {torch.bfloat16: "BF16", torch.float32: "F32"}
header, blobs, at = {}, [], 0
for name, t in tensors.items():
    raw = t.contiguous().view(torch.uint8).numpy().tobytes()
    header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
    blobs.append(raw)
    at += len(raw)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(data, "bfloat16_tensors.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
print("wrote bfloat16_reference.txt, bfloat16_tensors.pt, bfloat16_tensors.safetensors")
