"""Parts of the manifold kernel on the default model's shapes (the micro figures in docs/manifold-speed.md).

- epilogue:   compiled query-side epilogue per 64-query block (9 heads, head_dim 64, grid 8), µs per call
- feature product: weights (3 KV heads × 192 × n_k) @ key features (n_k × 768): CPU ``bmm`` vs one ``mm``
  per KV head (what the kernel does without autograd), ms, n_k = 512
- blocks:     full 512-token forward with surfaces at query blocks of 64 / 128 / 192 / 256, interleaved in one
  process, median time relative to blocks of 128

Medians of --repeats; threads pinned.

    .venv/bin/python benchmarks/manifold_kernel_parts.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from manifold_speed import _bank, _ids  # noqa: E402


def _median_s(fn, repeats: int) -> float:
    fn()
    xs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from geosteer.kernels import ext
    from geosteer.kernels.exact import grid_affine

    print(f"threads: {a.threads}\ncompiled_kernels: {(ext.get(), ext.status())[1]}")
    mod = ext.get()
    g = torch.Generator().manual_seed(0)
    if mod is not None:
        o = torch.randn(1, 9, 64, 64, 12, generator=g)
        q = torch.randn(1, 9, 64, 64, generator=g) * 2
        c = torch.randn(9, 64, 11, 11, generator=g)
        sc, off = grid_affine(8, -4.0, 4.0)
        t = _median_s(lambda: [mod.epilogue(o, q, c, 8, sc, off, True) for _ in range(20)], a.repeats) / 20
        print(f"epilogue_us_per_block: {t * 1e6:.0f}")

    x, y = torch.randn(3, 192, 512, generator=g), torch.randn(3, 512, 768, generator=g)
    out = torch.empty(3, 192, 768)
    bmm = _median_s(lambda: torch.bmm(x, y, out=out), a.repeats * 3)
    per = _median_s(lambda: [torch.mm(x[i], y[i], out=out[i]) for i in range(3)], a.repeats * 3)
    print(f"feature_product_ms: bmm {bmm * 1e3:.2f}, mm per KV head {per * 1e3:.2f}")

    import geosteer

    model, _ = geosteer.load_model("smollm2")
    model.eval()
    ids, bank = _ids(512), _bank(model, None)
    rm = bank.attach(model)
    times: dict[int, list[float]] = {b: [] for b in (64, 128, 192, 256)}
    try:
        for b in times:  # warm-up
            bank.block = b
            with torch.no_grad():
                model(ids, use_cache=False)
        for _ in range(a.repeats):
            for b in times:
                bank.block = b
                t = time.perf_counter()
                with torch.no_grad():
                    model(ids, use_cache=False)
                times[b].append(time.perf_counter() - t)
    finally:
        rm()
    rel = {b: statistics.median(x / r for x, r in zip(v, times[128], strict=True)) for b, v in times.items()}
    print("forward_time_vs_block128: " + ", ".join(f"{b}: {r:.3f}" for b, r in rel.items()))


if __name__ == "__main__":
    main()
