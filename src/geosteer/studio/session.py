"""The studio's model session: one model, one attached surface bank, edits with undo, cached effects.

Every method that touches the model or the bank takes ``self.lock`` (an ``RLock``), so concurrent requests
are serialised; results are cached per *state version* (an edit makes a new version, undo returns to the
version before the edit), so "before" continuations are computed once. The effect of a state is the
greedy continuation, the next-token top-10 and, against a reference state, KL(P_ref ‖ P_now) in nats
(the paper's steering measures, §5).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from geosteer.errors import GeosteerError
from geosteer.studio import bankio
from geosteer.studio.edits import EditSpec, UndoRecord, apply_edit, parse_edit, undo_edit
from geosteer.viz import surfaces as S

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REFERENCES = ("loaded", "previous", "none")
MAX_HISTORY = 100
MAX_PROMPT_TOKENS = 256


def safe_child(root: Path, name: str, what: str = "name") -> Path:
    """``root / name`` for a plain name (letters, digits, . _ -, no path separators, not '.'/'..')."""
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", "..") or ".." in name:
        raise ValueError(f"invalid {what} {name!r}: use 1–64 letters, digits, '.', '_' or '-' "
                         "(starting with a letter or digit, no '..', no '/')")
    root = root.resolve()
    p = (root / name).resolve()
    if p.parent != root:
        raise ValueError(f"invalid {what} {name!r}: must stay inside the workspace")
    return p


class Session:
    def __init__(self, model, tok, bank, workspace: Path, *, model_name: str = "model",
                 artifact_name: str = "initial", max_new_tokens_cap: int = 64, default_prompt: str = ""):
        self.model, self.tok, self.bank = model, tok, bank
        self.workspace = Path(workspace).resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.model_name = model_name
        self.artifact_name = artifact_name
        self.max_new_tokens_cap = max_new_tokens_cap
        self.default_prompt = default_prompt or "The theory of relativity states that"
        self.lock = threading.RLock()
        self._versions = itertools.count(1)
        self.version = next(self._versions)
        self.loaded_version = self.version
        self.loaded_coeffs = bank.coefficients.detach().clone()
        self.history: list[UndoRecord] = []
        self._cache: OrderedDict = OrderedDict()
        self._drafts: dict[tuple[str, int], list[int]] = {}  # last continuation per (prompt, n)
        self.saves = 0
        # Build (first time, ~1 min) or load the compiled surface kernels now, while the model is
        # loading anyway, so that the page's first request does not wait for a compiler.
        from geosteer.manifold import _ext

        _ext.get()

    # ---- helpers -------------------------------------------------------------------------------------
    def _cached(self, key, fn: Callable):
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        val = fn()
        self._cache[key] = val
        while len(self._cache) > 64:
            self._cache.popitem(last=False)
        return val

    def check_prompt(self, prompt: str | None) -> str:
        prompt = self.default_prompt if prompt is None else prompt
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt must be a non-empty string")
        n = len(self.tok(prompt, add_special_tokens=False).input_ids)
        if n > MAX_PROMPT_TOKENS:
            raise ValueError(f"prompt has {n} tokens; the studio accepts at most {MAX_PROMPT_TOKENS}")
        return prompt

    def check_new_tokens(self, n) -> int:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= self.max_new_tokens_cap:
            raise ValueError(f"max_new_tokens must be an integer in 1–{self.max_new_tokens_cap} (got {n!r})")
        return n

    def _with_coeffs(self, coeffs: torch.Tensor, fn: Callable):
        """Run ``fn`` with the bank's coefficients temporarily replaced by ``coeffs``."""
        c = self.bank.coefficients
        saved = c.detach().clone()
        with torch.no_grad():
            c.copy_(coeffs)
        try:
            return fn()
        finally:
            with torch.no_grad():
                c.copy_(saved)

    # ---- info ----------------------------------------------------------------------------------------
    def info(self) -> dict:
        with self.lock:
            c = self.bank.coefficients
            layers = S.bank_layers(self.bank)
            return {"model": self.model_name, "artifact": self.artifact_name, "layers": layers,
                    "heads": int(c.shape[1]), "dims": int(c.shape[2]), "K": int(c.shape[-1]),
                    "ranges": {str(lay): S.layer_range(self.bank, lay) for lay in layers},
                    "version": self.version, "history": [r.spec.describe() for r in self.history],
                    "max_new_tokens_cap": self.max_new_tokens_cap, "default_prompt": self.default_prompt,
                    "artifacts": self.list_artifacts()}

    # ---- model runs ------------------------------------------------------------------------------------
    @torch.no_grad()
    def _run_state(self, prompt: str, n: int) -> dict:
        """Greedy continuation and the next-token log-probs of the current coefficients.

        Decoding checks the last continuation computed for this prompt as a draft in one pass
        (:func:`geosteer.eval.generation.greedy_with_draft`): the tokens are those of plain greedy decoding,
        and an edit that leaves the first k tokens unchanged skips about k decoding steps.
        """
        from geosteer.eval.generation import greedy_with_draft, prompt_ids

        ids = prompt_ids(self.tok, prompt).to(next(self.model.parameters()).device)
        new, first = greedy_with_draft(self.model, self.tok, ids, n, self._drafts.get((prompt, n)))
        if len(self._drafts) > 64:
            self._drafts.clear()
        self._drafts[(prompt, n)] = new
        logp = torch.log_softmax(first.float(), dim=-1)
        top = torch.topk(logp, 10)
        return {"text": self.tok.decode(new, skip_special_tokens=True), "token_ids": new, "logp": logp,
                "top": [{"token": self.tok.decode([int(i)]), "id": int(i), "p": float(v.exp())}
                        for v, i in zip(top.values, top.indices, strict=True)]}

    def _state_result(self, which: str, prompt: str, n: int) -> dict:
        if which == "now":
            return self._cached((self.version, prompt, n), lambda: self._run_state(prompt, n))
        if which == "loaded":
            return self._cached((self.loaded_version, prompt, n), lambda: self._with_coeffs(
                self.loaded_coeffs, lambda: self._run_state(prompt, n)))
        if which == "none":
            zeros = torch.zeros_like(self.bank.coefficients)
            return self._cached(("none", prompt, n), lambda: self._with_coeffs(zeros, lambda: self._run_state(
                prompt, n)))
        if which == "previous":
            if not self.history:
                return self._state_result("now", prompt, n)
            rec = self.history[-1]

            def run_prev():
                prev = self.bank.coefficients.detach().clone()
                prev[rec.index] = rec.old
                return self._with_coeffs(prev, lambda: self._run_state(prompt, n))

            return self._cached((rec.version_before, prompt, n), run_prev)
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)} (got {which!r})")

    def effect(self, prompt: str | None = None, max_new_tokens: int = 20, reference: str = "loaded") -> dict:
        """Greedy continuation + top-10 now and in the reference state, and KL(P_ref ‖ P_now)."""
        from geosteer.eval.compare import first_divergence, kl_divergence

        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {', '.join(REFERENCES)} (got {reference!r})")
        prompt = self.check_prompt(prompt)
        n = self.check_new_tokens(max_new_tokens)
        t0 = time.perf_counter()
        with self.lock:
            before = self._state_result(reference, prompt, n)
            after = self._state_result("now", prompt, n)
            version = self.version
        kl = kl_divergence(before["logp"], after["logp"])
        strip = ("logp",)
        return {"prompt": prompt, "reference": reference, "version": version, "kl": kl,
                "changed": before["token_ids"] != after["token_ids"],
                "first_divergence": first_divergence(before["token_ids"], after["token_ids"]),
                "before": {k: v for k, v in before.items() if k not in strip},
                "after": {k: v for k, v in after.items() if k not in strip},
                "seconds": round(time.perf_counter() - t0, 4)}

    # ---- edits ---------------------------------------------------------------------------------------------
    def edit(self, body: dict) -> EditSpec:
        with self.lock:
            layers = S.bank_layers(self.bank)
            spec = parse_edit(body, tuple(self.bank.coefficients.shape), layers)
            rec = apply_edit(self.bank, spec, self.version)
            self.history.append(rec)
            if len(self.history) > MAX_HISTORY:
                self.history.pop(0)
            self.version = next(self._versions)
            return spec

    def undo(self) -> str | None:
        with self.lock:
            if not self.history:
                return None
            rec = self.history.pop()
            undo_edit(self.bank, rec)
            self.version = rec.version_before
            return rec.spec.describe()

    # ---- surfaces ------------------------------------------------------------------------------------------
    def qk(self, prompt: str) -> tuple[list[str], dict, dict]:
        with self.lock:
            return self._cached(("qk", self.version, prompt), lambda: S.record_qk_tensors(
                self.model, self.tok, prompt, S.bank_layers(self.bank)))

    def surface(self, layer: int, head: int, dim: int, prompt: str | None = None, n: int = 48,
                tokens: bool = True) -> dict:
        """Figures of one surface; ``tokens`` adds the prompt's dots (needs a forward pass, cached per state;
        the page first draws without them so the first paint never waits for the model)."""
        from geosteer.viz import figures as F

        prompt = self.check_prompt(prompt)
        if not isinstance(n, int) or not 8 <= n <= 128:
            raise ValueError(f"n (grid samples) must be an integer in 8–128 (got {n!r})")
        with self.lock:
            S.check_surface(self.bank, layer, head, dim)
            view = S.surface_view(self.bank, layer, head, dim, n=n)
            if tokens:
                labels, qs, ks = self.qk(prompt)
                row = S.qk_rows(labels, qs, ks, [(layer, head, dim)])
                pts = S.token_points(self.bank, layer, head, dim, labels, [r["q"] for r in row],
                                     [r["k"] for r in row])
            else:
                pts = F.TokenPoints([], np.zeros(0), np.zeros(0), np.zeros(0))
            version = self.version
        return {"layer": layer, "head": head, "dim": dim, "norm": view.norm, "version": version,
                "lo": view.lo, "hi": view.hi, "coeffs": view.coeffs.tolist(),
                "tokens": [{"token": t, "q": float(q), "k": float(k), "s": float(s)}
                           for t, q, k, s in zip(pts.labels, pts.q, pts.k, pts.s, strict=True)],
                "figures": {"terrain": F.terrain_figure(view, pts, height=430).to_plotly_json(),
                            "heatmap": F.heatmap_figure(view, pts, height=430).to_plotly_json(),
                            "controlnet": F.controlnet_figure(view, height=380).to_plotly_json()}}

    def rank(self, by: str = "norm", layer: int | None = None, top: int = 20,
             prompt: str | None = None) -> list[dict]:
        if by not in ("norm", "sensitivity"):
            raise ValueError(f"by must be 'norm' or 'sensitivity' (got {by!r})")
        if not isinstance(top, int) or not 1 <= top <= 200:
            raise ValueError(f"top must be an integer in 1–200 (got {top!r})")
        with self.lock:
            if layer is not None:
                S.layer_slot(self.bank, layer)
            norms = torch.as_tensor(S.surface_norms(self.bank))
            if by == "norm":
                score = norms
            else:
                prompt = self.check_prompt(prompt)
                score = self._cached(("sens", self.version, prompt), lambda: bankio.sensitivity(
                    self.model, self.tok, self.bank, prompt))
            layers = S.bank_layers(self.bank)
            if layer is not None:
                mask = torch.full_like(score, float("-inf"))
                slot = layers.index(layer)
                mask[slot] = score[slot]
                score = mask
            flat = score.reshape(-1)
            k = min(top, int(torch.isfinite(flat).sum()))
            vals, idx = torch.topk(flat, k)
            _, h, d = score.shape
            return [{"layer": layers[int(i) // (h * d)], "head": int(i) % (h * d) // d, "dim": int(i) % d,
                     "score": float(v), "norm": float(norms.reshape(-1)[int(i)])}
                    for v, i in zip(vals, idx, strict=True)]

    # ---- artifacts ---------------------------------------------------------------------------------------
    def list_artifacts(self) -> list[str]:
        return sorted(p.name for p in self.workspace.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and bankio.is_artifact(p))

    def save(self, name: str, overwrite: bool = False) -> dict:
        """Save the current surfaces as workspace/<name> (atomic: a complete artifact or none)."""
        target = safe_child(self.workspace, name, "artifact name")
        with self.lock:
            if target.exists() and not overwrite:
                raise FileExistsError(f"artifact '{name}' already exists in the workspace "
                                      "(choose another name or set overwrite)")
            bankio.save(self.bank, target)
            digest = coeff_digest(self.bank.coefficients)
            self.saves += 1
            return {"name": name, "digest": digest, "version": self.version}

    def load(self, name: str) -> dict:
        path = safe_child(self.workspace, name, "artifact name")
        if not bankio.is_artifact(path):
            have = ", ".join(self.list_artifacts()) or "none"
            raise GeosteerError(f"no artifact '{name}' in the workspace (have: {have})")
        with self.lock:
            self.bank = bankio.swap(self.model, self.bank, path)
            self.artifact_name = name
            self.history.clear()
            self.version = next(self._versions)
            self.loaded_version = self.version
            self.loaded_coeffs = self.bank.coefficients.detach().clone()
            self._cache.clear()
            return {"name": name, "digest": coeff_digest(self.bank.coefficients), "version": self.version}


def coeff_digest(c: torch.Tensor) -> str:
    """sha256 of the coefficient bytes (fp32, contiguous): equal digests mean identical surfaces."""
    return hashlib.sha256(c.detach().float().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]
