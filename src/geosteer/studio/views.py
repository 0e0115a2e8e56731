"""The studio session's read side: surface figures and rankings (a mixin of :class:`Session`).

Figures read the session's state under its short lock; what needs the model (the prompt's token dots,
sensitivity) is queued on the session's worker as an *analysis* job (ahead of queued generations) and cached
per (state version, prompt).
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import torch

from geosteer.studio import bankio
from geosteer.studio.worker import done
from geosteer.viz import surfaces as S


class SurfaceViews:
    """Needs from the session: ``lock``, ``bank``, ``_runtime``, ``version``, ``_cache``, ``_get``, ``_put``,
    ``_use``, ``worker``, ``model``, ``tok``, ``check_prompt``, ``model_text``."""

    # ---- surfaces ------------------------------------------------------------------------------------------
    def _analysis(self, tag: str, prompt: str, fn) -> Future:
        """Queue an analysis pass ``fn(runtime)`` of the current state, cached per (tag, version, prompt)."""
        with self.lock:
            key = (tag, self.version, prompt)
            if key in self._cache:
                return done(self._cache[key])
            coeffs, runtime = self.bank.coefficients.detach().clone(), self._runtime
            layers = S.bank_layers(self.bank)

        def job():
            val = self._get(key)
            if val is None:
                self._use(runtime, coeffs)
                val = fn(runtime, layers)
                self._put(key, val)
            return val

        return self.worker.run("analysis", job)

    def submit_qk(self, prompt: str | None) -> Future:
        """The prompt's post-RoPE q/k at the bank's layers in the current state (for the token dots)."""
        prompt = self.check_prompt(prompt)
        return self._analysis("qk", prompt, lambda rt, layers: S.record_qk_tensors(
            self.model, self.tok, self.model_text(prompt), layers))

    def submit_sensitivity(self, prompt: str | None) -> Future:
        prompt = self.check_prompt(prompt)
        return self._analysis("sens", prompt, lambda rt, layers: bankio.sensitivity(
            self.model, self.tok, rt, self.model_text(prompt)))

    def qk(self, prompt: str) -> tuple[list[str], dict, dict]:
        return self.submit_qk(prompt).result()

    def surface(self, layer: int, head: int, dim: int, prompt: str | None = None, n: int = 48,
                tokens: bool = True) -> dict:
        """Figures of one surface; ``tokens`` adds the prompt's dots (needs a forward pass, cached per state;
        the page first draws without them so the first paint never waits for the model)."""
        from geosteer.viz import figures as F

        prompt = self.check_prompt(prompt)
        if not isinstance(n, int) or isinstance(n, bool) or not 8 <= n <= 128:
            raise ValueError(f"n (grid samples) must be an integer in 8–128 (got {n!r})")
        with self.lock:
            S.check_surface(self.bank, layer, head, dim)
        qk = self.qk(prompt) if tokens else None  # the model pass, outside the state lock
        with self.lock:
            S.check_surface(self.bank, layer, head, dim)  # a load may have changed the bank meanwhile
            view = S.surface_view(self.bank, layer, head, dim, n=n)
            if qk is not None:
                labels, qs, ks = qk
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

    def check_rank(self, by: str, top: int) -> None:
        if by not in ("norm", "sensitivity"):
            raise ValueError(f"by must be 'norm' or 'sensitivity' (got {by!r})")
        if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= 200:
            raise ValueError(f"top must be an integer in 1–200 (got {top!r})")

    def rank(self, by: str = "norm", layer: int | None = None, top: int = 20,
             prompt: str | None = None) -> list[dict]:
        self.check_rank(by, top)
        with self.lock:
            if layer is not None:
                S.layer_slot(self.bank, layer)
        sens = self.submit_sensitivity(prompt).result() if by == "sensitivity" else None
        with self.lock:
            if layer is not None:
                S.layer_slot(self.bank, layer)
            norms = torch.as_tensor(S.surface_norms(self.bank))
            score = norms if sens is None else sens
            layers = S.bank_layers(self.bank)
        if score.shape != norms.shape:  # a load with another shape came between: rank the new bank
            return self.rank(by, layer, top, prompt)
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

