"""Shared pieces of the vLLM serving tests: prompts as token ids, the HF reference, vLLM runs."""

from __future__ import annotations

import os

import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in the test process (no spawn)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "3")  # GiB: a whole mixed batch at once (surface layers: 12x)

PROMPT_TOKENS = 16


def prompt_ids(tok, n: int, length: int = PROMPT_TOKENS) -> list[list[int]]:
    """``n`` held-out corpus openings, encoded the tokenizer's own way, cut to ``length`` tokens."""
    from geosteer.data.corpus import split_texts

    out = []
    for text in split_texts("heldout"):
        ids = tok(text[:400]).input_ids
        if len(ids) >= length:
            out.append(ids[:length])
        if len(out) == n:
            return out
    raise AssertionError("corpus too short")


@torch.no_grad()
def hf_greedy(model, prompts: list[list[int]], new: int, interventions=()) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy continuations on geosteer's Hugging Face path (KV cache) and each chosen token's log-prob;
    equal-length prompts in one batch, so no padding."""
    import geosteer
    from geosteer.kernels import exact

    ids = torch.tensor(prompts)
    compiled, exact.USE_EXT = exact.USE_EXT, False  # the reference in PyTorch ops; vLLM's layers compiled
    try:
        return _greedy_loop(model, ids, new, interventions, geosteer.steer)
    finally:
        exact.USE_EXT = compiled


def _greedy_loop(model, ids, new, interventions, steer):
    toks, lps = [], []
    with steer(model, *interventions):
        out = model(ids, use_cache=True)
        for _ in range(new):
            logp = torch.log_softmax(out.logits[:, -1].float(), -1)
            nxt = logp.argmax(-1)
            toks.append(nxt)
            lps.append(logp.gather(-1, nxt[:, None])[:, 0])
            out = model(nxt[:, None], past_key_values=out.past_key_values, use_cache=True)
    return torch.stack(toks, 1).tolist(), torch.stack(lps, 1).tolist()


def vllm_greedy(llm, prompts: list[list[int]], new: int, recipes: list[str | None]):
    """Greedy tokens and their log-probs from vLLM, one recipe per prompt (all in one ``generate`` call)."""
    from geosteer_vllm import sampling

    params = [sampling(r, max_tokens=new, temperature=0.0, logprobs=0, ignore_eos=True)
              for r in recipes]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    toks = [list(o.outputs[0].token_ids) for o in outs]
    lps = [[lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids, strict=True)]
           for o in outs]
    return toks, lps


def agreement(ref, got, ref_lp, got_lp) -> tuple[int, float]:
    """(prompts whose tokens match exactly, largest |Δ log-prob| over the steps where both agree so far)."""
    same, worst = 0, 0.0
    for a, b, la, lb in zip(ref, got, ref_lp, got_lp, strict=True):
        same += a == b
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            worst = max(worst, abs(la[i] - lb[i]))
            if x != y:
                break
    return same, worst


def tiny_folder(family: str, folder) -> str:
    """geosteer's tiny ``family`` model widened to head_dim 32 (the smallest head size vLLM's CPU attention
    takes), random weights scaled as geosteer's tiny models are, saved with its tokenizer as a model folder
    that declares ``tiny-<family>`` as its base (recipes made for it are checked against that name)."""
    from transformers import AutoModelForCausalLM

    from geosteer.models.tiny import tiny_config
    from geosteer.models.tokenizers import smollm2_tokenizer

    tok = smollm2_tokenizer()
    cfg = tiny_config(family, vocab_size=len(tok))
    cfg.hidden_size, cfg.intermediate_size, cfg.head_dim = 128, 256, 32  # 4 query heads
    if family == "qwen2":  # vLLM's Qwen2 takes sliding windows on all layers or none
        cfg.use_sliding_window, cfg.layer_types = False, ["full_attention"] * cfg.num_hidden_layers
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    cfg.geosteer_base_model = f"tiny-{family}"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(4.0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def random_surfaces(model, folder, layers=(0, 2), walls=()) -> str:
    """Random surfaces (grid 4 on [-3, 3], seed 0) on ``layers`` of ``model`` with ``walls``, saved."""
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    bank = SurfaceBank(ManifoldConfig.for_model(model, grid_size=4, grid_range=(-3.0, 3.0), layers=list(layers)))
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(0)))
    bank.set_walls(list(walls))
    return str(bank.save(folder))


def example_walls():
    """Exact walls: on surfaces layer 0 (whole heads, and single (head, dim) pairs), and on layer 1 (none)."""
    from geosteer.manifold.walls import Wall

    inf = float("inf")
    return [Wall(layer=0, heads=(0, 1), k=(0.0, inf)),
            Wall(layer=0, pairs=((2, 5), (3, 7)), q=(-0.5, inf), k=(-inf, 0.3)),
            Wall(layer=1, heads=(3,), q=(-inf, 0.0))]


def hf_reference(model, prompts, folder, new: int):
    """:func:`hf_greedy` under the recipe or artifact at ``folder`` (None: the stock model)."""
    from geosteer_vllm.plan import spec_of

    if folder is None:
        return hf_greedy(model, prompts, new)
    spec, _ = spec_of(folder)
    return hf_greedy(model, prompts, new, spec.build(model))


def changes(a, b) -> bool:
    """Whether two greedy runs differ: in a token, or by more than 1e-3 in a chosen token's log-prob."""
    (ta, la), (tb, lb) = a, b
    return ta != tb or any(abs(x - y) > 1e-3 for ra, rb in zip(la, lb, strict=True)
                           for x, y in zip(ra, rb, strict=True))


# ---- the tiny models' engine and recipes (test_quick.py, test_models.py) ----------------------------------
TINY_ENGINE = dict(gpu_memory_utilization=0.05, max_model_len=64, max_num_seqs=64, seed=0, enforce_eager=True)
TINY_RECIPES = {  # recipe keys as on the geosteer command line; the tiny models have layers 0-2
    "directional": dict(scale_site="attn_out", scale_par=1.6, scale_perp=0.6, scale_layers="0-1"),
    "dynamics": dict(mlp_variant="tangential", mlp_layers="1", alpha_mlp=1.4, gain_layers="2",
                     parallel_layers="0"),
    "value": dict(scale_site="value_full", scale_par=0.3, scale_perp=1.5, scale_layers="1-2"),
    "block": dict(scale_site="resid_post", scale_par=1.3, scale_layers="1"),
    "neutral": {},
}


def tiny_recipe_dirs(model, root, base_model: str, recipes: dict = TINY_RECIPES) -> dict[str, str]:
    """Name -> folder under ``root``: random surfaces, surfaces on layer 0 with :func:`example_walls`, and each
    of ``recipes`` saved as a recipe of ``base_model``."""
    from geosteer.recipe import InterventionSpec, save_recipe

    out = {"surfaces": random_surfaces(model, root / "surfaces"),
           "walls": random_surfaces(model, root / "walls", layers=(0,), walls=example_walls())}
    for name, keys in recipes.items():
        out[name] = str(save_recipe(root / name, InterventionSpec(**keys), base_model=base_model))
    return out


def random_vector_dirs(model, root, layers_by_point: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Hook point -> a saved steering-vectors artifact of random vectors (0.5 · N(0, 1), seed 0) on its layers."""
    from geosteer.vectors.apply import SteeringVectors

    gen = torch.Generator().manual_seed(0)
    d, n = model.config.hidden_size, model.config.num_hidden_layers
    return {point: str(SteeringVectors({i: 0.5 * torch.randn(d, generator=gen) for i in layers}, point=point,
                                       base_model="tiny-llama", d_model=d, n_layers=n).save(root / point))
            for point, layers in layers_by_point.items()}


# ---- a live `geosteer serve` (test_server.py, test_server_limits.py) ----------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: list[str], log_path, env: dict | None = None, wait_s: int = 900):
    """``geosteer serve ARGS --port P`` in a subprocess, once /health answers: (url, process). The caller
    stops it with :func:`stop_server`; a server that exits or does not come up fails with its log's tail."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    import httpx

    port = free_port()
    exe = Path(sys.executable).parent / "geosteer"
    log = open(log_path, "w")  # noqa: SIM115 - the server writes it until stop_server
    proc = subprocess.Popen([str(exe), "serve", *args, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})})
    proc.log = log
    url = f"http://127.0.0.1:{port}"
    for _ in range(wait_s):  # engine start: minutes on a busy 2-core machine
        if proc.poll() is not None:
            log.close()
            raise AssertionError(f"server exited {proc.returncode}: {Path(log_path).read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop_server(proc)
    raise AssertionError(f"server did not come up in {wait_s} s: {Path(log_path).read_text()[-3000:]}")


def stop_server(proc) -> int:
    """SIGTERM, then SIGKILL after 60 s; the exit code."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.log.close()
    return proc.returncode
