#!/usr/bin/python3
"""Writes tests/data/optim_reference.txt: PyTorch's optimizer trajectories, learning-rate schedules and
gradient-clipping results, for tests/test_optim.cpp, tests/test_optim_options.cpp and tests/test_lr_scheduler.cpp.

Run with Debian's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_optim_reference.py

Format: one entry per line, `key values...`, values are Python reprs (round-trip exact doubles).
- `init/paramI`: the initial float64 values of parameter I (shapes PARAM_SHAPES, flattened row-major).
- `CASE/sN/paramI`: parameter I after step N (N = 1..STEPS) of optimizer case CASE.
  Before every step each parameter's grad is set to g = p * p - 0.5 * p + c with c = GRAD_OFFSETS[I]
  (elementwise, float64, evaluated left to right), which the C++ test computes the same way.
- `SCHED/lr`: get_last_lr() after construction and after each scheduler step, flattened [step][group];
  `SCHED/momentum` likewise for the group momentum (or beta1) that OneCycleLR cycles.
- `clip/CASE/total` and `clip/CASE/gradI`: clip_grad_norm_'s returned norm and the clipped grads.
The case definitions below are repeated in the C++ tests by name; keep both in step.
"""
import os

import torch

torch.set_default_dtype(torch.float64)

PARAM_SHAPES = [(2, 3), (4,)]
INIT = [
    [0.5, -0.6, 2.0, 0.75, -0.3, 1.1],
    [-0.8, 0.05, 1.6, -0.9],
]
GRAD_OFFSETS = [0.1, -0.2]
STEPS = 6

# name -> (optimizer class, keyword arguments); for "groups" cases, a list of per-group overrides.
CASES = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_weight_decay": (torch.optim.SGD, dict(lr=0.1, weight_decay=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    "sgd_momentum_dampening": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.05)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_maximize": (torch.optim.SGD, dict(lr=0.02, momentum=0.5, maximize=True)),
    "adam": (torch.optim.Adam, dict(lr=0.05)),
    "adam_weight_decay": (torch.optim.Adam, dict(lr=0.05, weight_decay=0.1)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.05, betas=(0.8, 0.9), amsgrad=True, weight_decay=0.02)),
    "adam_maximize": (torch.optim.Adam, dict(lr=0.02, maximize=True, eps=1e-6)),
    "adamw": (torch.optim.AdamW, dict(lr=0.05, weight_decay=0.1)),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.05, betas=(0.7, 0.95), amsgrad=True)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=0.01)),
    "rmsprop_momentum": (torch.optim.RMSprop, dict(lr=0.01, momentum=0.9, alpha=0.9)),
    "rmsprop_centered_momentum": (torch.optim.RMSprop,
                                  dict(lr=0.01, centered=True, momentum=0.8, weight_decay=0.1, eps=1e-6)),
    "rmsprop_centered_maximize": (torch.optim.RMSprop, dict(lr=0.005, centered=True, maximize=True)),
}
# Two groups, one parameter each: the defaults, then the overrides for each group.
GROUP_CASES = {
    "sgd_groups": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), [dict(), dict(lr=0.01, weight_decay=0.1)]),
    "adam_groups": (torch.optim.Adam, dict(lr=0.05, weight_decay=0.1), [dict(weight_decay=0.0), dict(lr=0.02)]),
}


def grad_of(p, offset):
    return p * p - 0.5 * p + offset


def fresh_params():
    return [torch.tensor(values).reshape(shape).requires_grad_() for values, shape in zip(INIT, PARAM_SHAPES)]


def run(optimizer, params, lines, name):
    for step in range(1, STEPS + 1):
        with torch.no_grad():
            for p, offset in zip(params, GRAD_OFFSETS):
                p.grad = grad_of(p.detach().clone(), offset)
        optimizer.step()
        for i, p in enumerate(params):
            lines.append(entry(f"{name}/s{step}/param{i}", p.detach().flatten().tolist()))


def entry(key, values):
    return key + " " + " ".join(repr(float(v)) for v in values)


def optimizer_cases(lines):
    for i, values in enumerate(INIT):
        lines.append(entry(f"init/param{i}", values))
    for name, (cls, kwargs) in CASES.items():
        params = fresh_params()
        run(cls(params, foreach=False, **kwargs), params, lines, name)
    for name, (cls, defaults, overrides) in GROUP_CASES.items():
        params = fresh_params()
        groups = [dict(params=[p], **o) for p, o in zip(params, overrides)]
        run(cls(groups, foreach=False, **defaults), params, lines, name)


def schedule(lines, name, optimizer, make, steps, momentum_key=None):
    scheduler = make(optimizer)
    lrs, momenta = [], []

    def record():
        lrs.extend(scheduler.get_last_lr())
        if momentum_key == "betas":
            momenta.extend(g["betas"][0] for g in optimizer.param_groups)
        elif momentum_key:
            momenta.extend(g[momentum_key] for g in optimizer.param_groups)

    record()
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        record()
    lines.append(entry(f"{name}/lr", lrs))
    if momentum_key:
        lines.append(entry(f"{name}/momentum", momenta))


def scheduler_cases(lines):
    S = torch.optim.lr_scheduler

    def sgd(momentum=0.0):
        a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
        return torch.optim.SGD([dict(params=[a]), dict(params=[b], lr=0.05)], lr=0.1, momentum=momentum)

    def adam():
        a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
        return torch.optim.Adam([dict(params=[a]), dict(params=[b], lr=0.05)], lr=0.1)

    schedule(lines, "step_lr", sgd(), lambda o: S.StepLR(o, step_size=3, gamma=0.5), 10)
    schedule(lines, "multistep_lr", sgd(), lambda o: S.MultiStepLR(o, milestones=[2, 5, 5, 8], gamma=0.1), 10)
    schedule(lines, "exponential_lr", sgd(), lambda o: S.ExponentialLR(o, gamma=0.9), 10)
    schedule(lines, "cosine_lr", sgd(), lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001), 25)
    schedule(lines, "linear_lr", sgd(), lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4), 8)
    schedule(lines, "one_cycle", sgd(momentum=0.9),
             lambda o: S.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=20, pct_start=0.3), 19, "momentum")
    schedule(lines, "one_cycle_three_phase_linear", adam(),
             lambda o: S.OneCycleLR(o, max_lr=0.4, total_steps=15, pct_start=0.25, anneal_strategy="linear",
                                    three_phase=True, div_factor=10.0, final_div_factor=100.0), 15, "betas")
    schedule(lines, "sequential_warmup_cosine", sgd(),
             lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=3),
                                          S.CosineAnnealingLR(o, T_max=6)], milestones=[3]), 12)
    schedule(lines, "chained_linear_exponential", sgd(),
             lambda o: S.ChainedScheduler([S.LinearLR(o, start_factor=0.5, total_iters=4),
                                           S.ExponentialLR(o, gamma=0.9)]), 8)


CLIP_GRADS = [
    [0.5, -1.5, 2.0, 0.25, -0.75, 1.0],
    [3.0, -0.2, 0.0, -1.1],
]
CLIP_CASES = {
    "l2": dict(max_norm=1.0),
    "l2_no_clip": dict(max_norm=100.0),
    "inf": dict(max_norm=0.5, norm_type=float("inf")),
    "l1": dict(max_norm=2.0, norm_type=1.0),
    "l3": dict(max_norm=1.5, norm_type=3.0),
}


def clip_cases(lines):
    for name, kwargs in CLIP_CASES.items():
        params = fresh_params()
        for p, g in zip(params, CLIP_GRADS):
            p.grad = torch.tensor(g).reshape(p.shape)
        total = torch.nn.utils.clip_grad_norm_(params, **kwargs)
        lines.append(entry(f"clip/{name}/total", [total.item()]))
        for i, p in enumerate(params):
            lines.append(entry(f"clip/{name}/grad{i}", p.grad.flatten().tolist()))
    params = fresh_params()
    for p, g in zip(params, CLIP_GRADS):
        p.grad = torch.tensor(g).reshape(p.shape)
    torch.nn.utils.clip_grad_value_(params, 0.6)
    for i, p in enumerate(params):
        lines.append(entry(f"clip/value/grad{i}", p.grad.flatten().tolist()))


def main():
    lines = [f"# generated by tests/reference/make_optim_reference.py with torch {torch.__version__}"]
    optimizer_cases(lines)
    scheduler_cases(lines)
    clip_cases(lines)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "optim_reference.txt")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} lines to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
