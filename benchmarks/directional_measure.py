"""Cost of the one-pass directional measurement vs a stock forward (per /work/shared/BENCHMARKING.md).

Interleaved A/B pairs after one warm-up each, median ratio and min-max spread; peak RSS of each side in
its own subprocess. Prints ``name: value`` lines.

    .venv/bin/python benchmarks/directional_measure.py --model smollm2 --tokens 512 --pairs 7 --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import paired, reset_peak_rss, status_mb  # noqa: E402


def _setup(model_name: str, tokens: int):
    from geosteer import load_model
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import encode

    m, tok = load_model(model_name)
    ids = encode(tok, split_text("heldout", max_chars=tokens * 10))[:tokens][None]
    return m, ids


def _memory_child(model_name: str, tokens: int, mode: str, threads: int) -> None:
    from geosteer.directional.measure import DirectionalMeasure
    from geosteer.interventions import steer

    torch.set_num_threads(threads)
    m, ids = _setup(model_name, tokens)
    before = reset_peak_rss()  # only the forward's peak counts, not the model load's
    with torch.no_grad():
        if mode == "stock":
            m(input_ids=ids, use_cache=False)
        else:
            meas = DirectionalMeasure(residual=True, value=(mode == "full"))
            with steer(m, meas):
                m(input_ids=ids, use_cache=False)
    after = status_mb("VmHWM")
    print(json.dumps({"mode": mode, "peak_rss_mb": after, "peak_growth_mb": after - before}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--_child", default=None)
    a = ap.parse_args()
    if a._child:
        _memory_child(a.model, a.tokens, a._child, a.threads)
        return

    from geosteer.directional.measure import DirectionalMeasure
    from geosteer.interventions import steer

    torch.set_num_threads(a.threads)
    m, ids = _setup(a.model, a.tokens)

    def stock():
        m(input_ids=ids, use_cache=False)

    def measured(value: bool):
        def run():
            meas = DirectionalMeasure(residual=True, value=value)
            with steer(m, meas):
                m(input_ids=ids, use_cache=False)
            meas.rows()
        return run

    print(f"machine: {platform.machine()} cores={torch.get_num_threads()} threads torch={torch.__version__}")
    print(f"model: {a.model} tokens: {ids.shape[1]} dtype: fp32 pairs: {a.pairs}")
    with torch.no_grad():
        for name, fn in (("residual", measured(False)), ("residual+value", measured(True))):
            r = paired(stock, fn, a.pairs)["wall"]
            print(f"stock_forward_s: {r['a_s']:.3f}")
            print(f"measure_{name}_s: {r['b_s']:.3f}")
            print(f"ratio_{name}: {r['ratio']:.3f} (min {r['ratio_min']:.3f}, max {r['ratio_max']:.3f})")
    if not a.no_memory:
        for mode in ("stock", "residual", "full"):
            out = subprocess.run([sys.executable, __file__, "--model", a.model, "--tokens", str(a.tokens),
                                  "--threads", str(a.threads), "--_child", mode],
                                 capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            r = json.loads(out)
            print(f"peak_rss_mb_{mode}: {r['peak_rss_mb']:.0f} (forward growth {r['peak_growth_mb']:.0f})")


if __name__ == "__main__":
    main()
