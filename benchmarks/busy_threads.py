"""A short `geosteer generate` on a busy CPU: geosteer's default threads vs `--threads 1`.

Starts --busy CPU-bound processes (plain Python loops), then times whole `geosteer generate` commands
(start-up, model load and generation: what a user waits for), arms interleaved A, B, A, B after one
warm-up of each, and prints the median and min-max of each arm and the ratio of each arm to `--threads 1`
(median of the per-pair ratios). The 1-minute load average is printed before and after: on a shared
machine other people's work adds to the busy processes. The busy processes are stopped at the end.

Arms: `default` (no --threads: geosteer's choice), `threads1` (`--threads 1`), `threadsN` (`--threads
<cpu count>`), `old` (`--threads <cpu count>` with the OpenMP wait policy left at libgomp's own default
spin, GOMP_SPINCOUNT=300000: what geosteer did before it chose threads and a passive wait).

    .venv/bin/python benchmarks/busy_threads.py --busy 2 --pairs 3 --tokens 24 \
        --surfaces smollm2-surfaces-all --arms default threads1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROMPT = "The theory of relativity states that"


def _busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _arm(name: str) -> tuple[list[str], dict[str, str]]:
    cpus = str(os.cpu_count() or 1)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if name == "default":
        return [], env
    if name == "threads1":
        return ["--threads", "1"], env
    if name == "threadsN":
        return ["--threads", cpus], env
    if name == "old":
        return ["--threads", cpus], {**env, "GOMP_SPINCOUNT": "300000"}
    raise SystemExit(f"unknown arm {name!r}: default, threads1, threadsN, old")


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--surfaces", default="smollm2-surfaces-all", help="'' for none")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--busy", type=int, default=2, help="CPU-bound processes started first")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=["default", "threads1"])
    ap.add_argument("--out", type=Path, help="write the numbers as JSON too")
    a = ap.parse_args()
    geosteer = str(Path(sys.executable).with_name("geosteer"))
    base = [geosteer, "generate", "-m", a.model, "-p", PROMPT, "--max-new-tokens", str(a.tokens)]
    if a.surfaces:
        base += ["--surfaces", a.surfaces]
    arms = {name: _arm(name) for name in a.arms}
    busy = _busy(a.busy)
    try:
        time.sleep(2)
        load_before = os.getloadavg()[0]
        times: dict[str, list[float]] = {name: [] for name in arms}
        for rep in range(a.pairs + 1):  # the first round is the warm-up
            for name, (extra, env) in arms.items():
                t = _time(base + extra, env)
                if rep:
                    times[name].append(t)
                print(f"{'warm-up' if not rep else f'pair {rep}'} {name}: {t:.1f} s", flush=True)
        load_after = os.getloadavg()[0]
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"machine: {platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}")
    print(f"busy processes: {a.busy}; load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    print(f"command: {' '.join(base[1:])} [arm options]")
    ref = "threads1" if "threads1" in times else next(iter(times))
    result = {"busy": a.busy, "load_before": load_before, "load_after": load_after, "command": base[1:], "arms": {}}
    for name, ts in times.items():
        ratios = [t / r for t, r in zip(ts, times[ref], strict=True)]
        result["arms"][name] = {"seconds": ts, "ratio_to_" + ref: ratios}
        print(f"{name}: median {statistics.median(ts):.1f} s (min {min(ts):.1f}, max {max(ts):.1f}); "
              f"ratio to {ref}: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
