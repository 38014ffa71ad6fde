#!/usr/bin/env python3
"""The PyTorch side of tapegrad's interop tests (tests/test_interop_torch.cpp), run by ctest in two steps:

  torch_side.py write DIR   PyTorch builds the examples' Fashion-MNIST CNN and MLP (the same layers and state keys as
                            examples/common/recipes.cpp), writes them with torch.save and as safetensors (by hand:
                            Debian 12 has no safetensors package) with reference eval outputs, and trains an MLP on a
                            subset of Fashion-MNIST for tapegrad to evaluate and fine-tune.
  torch_side.py check DIR   After the C++ test: loads every file tapegrad wrote with load_state_dict(strict=True),
                            compares eval outputs and accuracies with tapegrad's, and checks the zip layout.

Exits non-zero with a message on any mismatch, and when torch cannot be imported (never a silent pass).
"""
import gzip
import json
import os
import pickle
import struct
import sys
import zipfile

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as error:  # pragma: no cover - the message is the point
    sys.exit(f"torch_side.py: cannot import PyTorch ({error}); install Debian's python3-torch "
             "(bash scripts/setup.sh installs it)")

# max |difference| / max |reference|: the 1e-6 for float64; float32 GEMMs summed in another order differ
# by up to ~1.1e-6 (about nine float32 ulps), so 4e-6 there (see tests/test_interop_torch.cpp).
RTOL = {torch.float64: 1e-6, torch.float32: 4e-6}
FASHION = os.environ.get("TAPEGRAD_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530  # framework/data/dataset.h: kFashionMnistMean, kFashionMnistStd
TRAIN_SUBSET, TEST_SUBSET = 3000, 1000
DTYPES = {"float32": torch.float32, "float64": torch.float64}
ST_CODES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64"}
ST_TYPES = {v: k for k, v in ST_CODES.items()}


def make_cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


# docs/interop.md quotes the block between the DOC markers (tests/test_docs_interop.cpp checks it); check() and
# write() below use it, so the page's Python runs in CI.
# DOC-BEGIN python
import torch
from torch import nn


# The same layers in the same order as tapegrad's examples::make_mlp(), so the state keys agree.
def make_mlp(hidden=256):
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, 10))


def load_from_tapegrad(path):  # a file tapegrad::save_pytorch wrote
    model = make_mlp()
    model.load_state_dict(torch.load(path), strict=True)
    return model.eval()


def save_for_tapegrad(model, path):  # tapegrad::load_pytorch (or load) reads it
    torch.save(model.state_dict(), path)
# DOC-END python


ARCHS = {"cnn": make_cnn, "mlp": make_mlp}


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": ST_CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body, out = data[8 + length:], {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = ST_TYPES[info["dtype"]]
        np_dtype = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64}[dtype]
        out[name] = torch.from_numpy(np.frombuffer(body[begin:end], dtype=np_dtype).copy()).reshape(info["shape"])
    return out


def randomize(model, seed):
    """Every parameter and BatchNorm buffer gets values a fresh model would not have."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.1 + (1.0 if name.endswith("weight") and p.dim() == 1 else 0.0))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g, dtype=torch.float64) * 0.2)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g, dtype=torch.float64) + 0.5)
            elif name.endswith("num_batches_tracked"):
                b.fill_(1000 + seed)


def relative_error(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def fashion(split, count):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(f"{FASHION}/{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)[:count]
    with gzip.open(f"{FASHION}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)[:count]
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.float(), torch.from_numpy(labels.astype(np.int64))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return int((model(x).argmax(1) == y).sum())


def write(out):
    torch.manual_seed(0)
    # Random weights and buffers, both formats, both float types; reference outputs for a fixed input.
    for arch, build in ARCHS.items():
        for dt_name, dt in DTYPES.items():
            model = build().to(dt)
            randomize(model, seed=7 if arch == "cnn" else 11)
            model.eval()
            x = torch.randn(5, 1, 28, 28, generator=torch.Generator().manual_seed(3), dtype=dt)
            with torch.no_grad():
                y = model(x)
            stem = f"{out}/torch_{arch}_{dt_name}"
            torch.save(model.state_dict(), stem + ".pt")
            write_safetensors(stem + ".safetensors", model.state_dict())
            write_safetensors(stem + "_io.safetensors", {"input": x, "output": y})
            if arch == "cnn" and dt is torch.float32:
                # Strided views of shared storages: transposed weights, a BatchNorm's four [C] vectors in one.
                state = {}
                for name, t in model.state_dict().items():
                    if t.dim() >= 2:
                        order = list(reversed(range(t.dim())))
                        state[name] = t.permute(order).contiguous().permute(order)
                    else:
                        state[name] = t
                for layer in ("1", "5"):
                    keys = [f"{layer}.{k}" for k in ("weight", "bias", "running_mean", "running_var")]
                    shared = torch.stack([state[k] for k in keys])
                    for i, k in enumerate(keys):
                        state[k] = shared[i]
                assert not state["0.weight"].is_contiguous() and state["5.bias"].storage_offset() > 0
                torch.save(state, f"{out}/torch_cnn_strided.pt")
    # Half precision files load into a float32 model; the reference is the rounded weights' float32 output.
    model = make_mlp()
    randomize(model, seed=13)
    model.eval()
    x = torch.randn(5, 1, 28, 28, generator=torch.Generator().manual_seed(4))
    for low in (torch.float16, torch.bfloat16):
        name = "float16" if low is torch.float16 else "bfloat16"
        state = {k: (v.to(low) if v.is_floating_point() else v) for k, v in model.state_dict().items()}
        rounded = make_mlp()
        rounded.load_state_dict({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in state.items()})
        rounded.eval()
        with torch.no_grad():
            y = rounded(x)
        torch.save(state, f"{out}/torch_mlp_{name}.pt")
        write_safetensors(f"{out}/torch_mlp_{name}.safetensors", state)
        write_safetensors(f"{out}/torch_mlp_{name}_io.safetensors", {"input": x, "output": y})
    # Files tapegrad must refuse: a pickle that would run os.system, and the pre-1.6 (non-zip) format.
    class Exploit:
        def __reduce__(self):
            return (os.system, ("echo this must never run",))
    with zipfile.ZipFile(f"{out}/exploit.pt", "w") as z:
        z.writestr("exploit/data.pkl", pickle.dumps({"0.weight": Exploit()}, protocol=2))
        z.writestr("exploit/version", "3\n")
    torch.save(make_mlp().state_dict(), f"{out}/legacy.pt", _use_new_zipfile_serialization=False)
    # A model trained in PyTorch (a subset of Fashion-MNIST, one epoch) for tapegrad to evaluate and fine-tune.
    x_train, y_train = fashion("train", TRAIN_SUBSET)
    x_test, y_test = fashion("test", TEST_SUBSET)
    x_test.numpy().tofile(f"{out}/test_images.f32")
    y_test.numpy().tofile(f"{out}/test_labels.i64")
    model = make_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for start in range(0, TRAIN_SUBSET, 50):
        loss = nn.functional.cross_entropy(model(x_train[start:start + 50]), y_train[start:start + 50])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    correct = accuracy(model, x_test, y_test)
    save_for_tapegrad(model, f"{out}/torch_trained_mlp.pt")
    with open(f"{out}/torch_trained.json", "w") as f:
        json.dump({"correct": correct, "count": TEST_SUBSET}, f)
    print(f"torch_side.py write: PyTorch-trained MLP: {correct}/{TEST_SUBSET} correct on the test subset")


def check_alignment(path):
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise SystemExit(f"{path}: {info.filename} is compressed (torch.save stores records)")
            f.seek(info.header_offset)
            local = f.read(30)
            name_length, extra_length = struct.unpack("<HH", local[26:30])
            data_offset = info.header_offset + 30 + name_length + extra_length
            if "/data/" in info.filename and data_offset % 64 != 0:
                raise SystemExit(f"{path}: record {info.filename} starts at {data_offset}, not 64-byte aligned")


def check(out):
    failures, worst = [], {"float32": 0.0, "float64": 0.0}
    with open(f"{out}/tg_expect.json") as f:
        expect = json.load(f)
    for arch, build in ARCHS.items():
        for dt_name, dt in DTYPES.items():
            io = read_safetensors(f"{out}/tg_{arch}_{dt_name}_io.safetensors")
            for ext in ("pt", "safetensors"):
                path = f"{out}/tg_{arch}_{dt_name}.{ext}"
                state = torch.load(path) if ext == "pt" else read_safetensors(path)
                if ext == "pt":
                    check_alignment(path)
                model = build().to(dt)
                model.load_state_dict(state, strict=True)  # raises on a missing or unexpected key
                model.eval()
                for name, t in model.state_dict().items():
                    if name.endswith("num_batches_tracked") and int(t) != expect["num_batches_tracked"]:
                        failures.append(f"{path}: {name} is {int(t)}, tapegrad saved {expect['num_batches_tracked']}")
                    if t.dtype != (torch.int64 if name.endswith("num_batches_tracked") else dt):
                        failures.append(f"{path}: {name} is {t.dtype}")
                with torch.no_grad():
                    y = model(io["input"])
                error = relative_error(y, io["output"])
                worst[dt_name] = max(worst[dt_name], error)
                if error > RTOL[dt]:
                    failures.append(f"{path}: eval output differs from tapegrad's by {error:.3g} (relative)")
    x_test = torch.from_numpy(np.fromfile(f"{out}/test_images.f32", dtype=np.float32)).reshape(-1, 1, 28, 28)
    y_test = torch.from_numpy(np.fromfile(f"{out}/test_labels.i64", dtype=np.int64))
    for stem, ext in (("tg_trained_mlp", "pt"), ("tg_finetuned_mlp", "safetensors")):
        path = f"{out}/{stem}.{ext}"
        if ext == "pt":
            model = load_from_tapegrad(path)
        else:
            model = make_mlp()
            model.load_state_dict(read_safetensors(path), strict=True)
        correct = accuracy(model, x_test, y_test)
        with open(f"{out}/{stem}.correct") as f:
            tapegrad_correct = int(f.read())
        print(f"torch_side.py check: {stem}: PyTorch {correct}/{len(y_test)}, tapegrad {tapegrad_correct}/{len(y_test)}")
        if correct != tapegrad_correct:
            failures.append(f"{path}: PyTorch gets {correct} correct, tapegrad got {tapegrad_correct}")
    print(f"torch_side.py check: largest relative output difference float32 {worst['float32']:.3g} (limit "
          f"{RTOL[torch.float32]:g}), float64 {worst['float64']:.3g} (limit {RTOL[torch.float64]:g})")
    if failures:
        raise SystemExit("torch_side.py check failed:\n  " + "\n  ".join(failures))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit("usage: torch_side.py write|check DIR")
    torch.set_num_threads(1)
    os.makedirs(sys.argv[2], exist_ok=True)
    (write if sys.argv[1] == "write" else check)(sys.argv[2])
