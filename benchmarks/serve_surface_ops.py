"""Per-layer cost of a served surfaces layer's arithmetic, outside vLLM: value channels and epilogue.

    .venv-serve/bin/python benchmarks/serve_surface_ops.py --tokens 16,512 --threads 1

Default model's shapes (3 KV heads × 3 query heads, head_dim 64, grid 8: K = 11, C = 12 channels), random
inputs. Three forms of the same formulas, checked equal first: ``dense`` (the dense basis B(k), B(q) as
PyTorch ops: how served layers computed them before), ``torch`` (``serve.surface_ops`` on PyTorch ops: the
fallback) and ``compiled`` (``serve.surface_ops`` on geosteer's compiled CPU kernels), plus the copies that
vLLM's attention interface needs (k and q repeated over the C channels). Times: the lower quartile of
``--reps`` calls, in microseconds. Tokens per call: 16 is one decode step at batch 16, 512 a prefill of
16 prompts × 32 tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HKV, REP, D, GRID, LO, HI = 3, 3, 64, 8, -4.0, 4.0


def _dense_channels(kh, vh):
    import torch

    from geosteer.kernels.bspline import bspline_basis

    return torch.cat([vh.unsqueeze(2), (vh.unsqueeze(-1) * bspline_basis(kh, GRID, LO, HI)).transpose(2, 3)], dim=2)


def _dense_delta(f, q, coeff):
    import torch

    from geosteer.kernels.bspline import bspline_basis

    n, K = f.shape[0], GRID + 3
    fo = f.permute(0, 1, 3, 4, 2).reshape(n, HKV * REP, D, K)
    return (fo * torch.einsum("nhda,hdab->nhdb", bspline_basis(q, GRID, LO, HI), coeff)).sum(-1)


def _time(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 4] * 1e6


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", default="16,512", help="tokens per call, comma-separated")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args(argv)
    import torch

    from geosteer.kernels import ext

    torch.set_num_threads(a.threads)
    if ext.get() is None:
        raise SystemExit(f"error: the compiled CPU kernels are not available here ({ext.status()})")
    coeff = torch.randn(HKV * REP, D, GRID + 3, GRID + 3, generator=torch.Generator().manual_seed(0)) * 0.1
    rows = []
    for n in (int(x) for x in a.tokens.split(",")):
        rows += _rows_for(n, coeff, a.reps)
    return rows


def _rows_for(n: int, coeff, reps: int) -> list[dict]:
    import torch

    from geosteer.kernels import exact
    from geosteer_vllm import surface_ops

    K, grid = GRID + 3, (GRID, LO, HI)
    C, H = 1 + K, HKV * REP
    g = torch.Generator().manual_seed(n)
    kh, vh = torch.randn(n, HKV, D, generator=g) * 2, torch.randn(n, HKV, D, generator=g)
    q, o = torch.randn(n, H, D, generator=g) * 2, torch.randn(n, HKV, C, REP, D, generator=g)
    f = o[:, :, 1:]
    forms = {"dense": (lambda: _dense_channels(kh, vh), lambda: _dense_delta(f, q, coeff))}
    for name, compiled in (("torch", False), ("compiled", True)):
        forms[name] = (lambda c=compiled: _with(exact, c, surface_ops.value_channels, kh, vh, [grid]),
                       lambda c=compiled: _with(exact, c, surface_ops.surface_delta, f, q, coeff, grid))
    ref = [fn() for fn in forms["dense"]]
    rows = []
    for name, fns in forms.items():
        for r, fn in zip(ref, fns, strict=True):
            torch.testing.assert_close(fn(), r, atol=1e-4, rtol=1e-4)
        rows.append({"tokens": n, "form": name, "value_channels_us": round(_time(fns[0], reps)),
                     "epilogue_us": round(_time(fns[1], reps))})
        print(json.dumps(rows[-1]), flush=True)
    kq = _time(lambda: (kh.unsqueeze(2).expand(n, HKV, C, D).reshape(n, -1),
                        q.view(n, HKV, 1, REP, D).expand(n, HKV, C, REP, D).reshape(n, -1)), reps)
    rows.append({"tokens": n, "form": "k,q repeated over C", "copies_us": round(kq)})
    print(json.dumps(rows[-1]), flush=True)
    return rows


def _with(exact, compiled: bool, fn, *args):
    saved, exact.USE_EXT = exact.USE_EXT, compiled
    try:
        return fn(*args)
    finally:
        exact.USE_EXT = saved


if __name__ == "__main__":
    main()
