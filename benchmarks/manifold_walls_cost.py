"""Forward time at 512 tokens (median of 3, 1 thread): stock, shipped surfaces, + exact walls on layer 10.

Exact walls recompute the walled (head, dim) pairs in PyTorch on top of the (compiled) unwalled kernel;
this measures what that costs. Run: OMP_NUM_THREADS=1 python benchmarks/manifold_walls_cost.py
"""
import time

import torch

import geosteer
from geosteer import manifold as M
from geosteer.interventions import steer
from geosteer.manifold.coverage import heldout_windows
from geosteer.manifold.explore import top_surfaces
from geosteer.manifold.walls import Wall

torch.set_num_threads(1)
model, tok = geosteer.load_model("smollm2")
ids = torch.cat(heldout_windows(tok, 4, 128), 1)
bank = M.load("artifacts/smollm2-surfaces", model=model)
top = [(r["head"], r["dim"]) for r in top_surfaces(bank, 10, layers=[10])]


def median3() -> float:
    model(ids, use_cache=False)  # warm-up
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        model(ids, use_cache=False)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[1]


def t(walls):
    bank.set_walls(walls)
    with torch.no_grad(), steer(model, bank):
        return median3()


with torch.no_grad():
    print("stock", median3())
for name, w in [("surfaces", []), ("exact wall top-10 L10", [Wall(layer=10, pairs=tuple(top))]),
                ("exact wall layer 10", [Wall(layer=10)])]:
    print(name, t(w))
