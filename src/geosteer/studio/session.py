"""The studio's model session: one model, one surface bank, edits with undo, cached effects.

``self.bank`` is the state (edited, read, saved; under the short ``self.lock``); a runtime copy attached to
the model is used only by the worker, which copies a snapshot in before each pass. Effects (greedy
continuation, next-token top-10, KL(P_ref ‖ P_now) in nats, paper §5) are cached per state version.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch

from geosteer.errors import GeosteerError, OutputRefused
from geosteer.eval.chat import format_prompt
from geosteer.eval.compare import first_divergence, kl_divergence
from geosteer.eval.generation import greedy_with_draft, prompt_ids
from geosteer.kernels import ext
from geosteer.models.loading import input_device
from geosteer.outputs import check_output_folder
from geosteer.overflow import NonFiniteLogits, overflow_error, probe_ok
from geosteer.studio import bankio
from geosteer.studio import workspace as folder
from geosteer.studio.bodies import EffectBody, parse
from geosteer.studio.edits import EditSpec, UndoRecord, apply_edit, parse_edit, undo_edit
from geosteer.studio.views import SurfaceViews
from geosteer.studio.worker import ModelWorker, done
from geosteer.studio.workspace import resolved_workspace, safe_child
from geosteer.viz import surfaces as S

RESERVED = ("results",)  # workspace/results holds the study result files the studio serves
MAX_HISTORY = 100
MAX_PROMPT_TOKENS = 256


def clone_bank(bank):
    """An independent copy of a bank (coefficients, ranges, config, history), not attached to a model."""
    bank.clear_cache()
    return copy.deepcopy(bank)


@dataclass
class _State:
    """One coefficient state to run the model in: cache key and a private copy of the coefficients."""
    key: object
    coeffs: torch.Tensor | None  # None when the result was cached at planning time
    value: dict | None = None  # that cached result
    walls: list | None = None  # the exact walls of that state (None: leave the runtime's as they are)


class Session(SurfaceViews):
    def __init__(self, model, tok, bank, workspace: Path, *, model_name: str = "model",
                 artifact_name: str = "initial", max_new_tokens_cap: int = 64, default_prompt: str = "",
                 max_queue: int = 32, chat: bool = False, system: str | None = None):
        self.model, self.tok = model, tok
        self.chat, self.system = chat, system  # prompts through the chat template (as a user message)
        self.bank = clone_bank(bank)  # the state (never attached)
        self._runtime = bank  # attached to the model, used by the worker only
        self.workspace = resolved_workspace(Path(workspace))
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise GeosteerError(f"workspace {self.workspace} is (or lies under) a file, not a folder") from None
        self.model_name = model_name
        self.artifact_name = artifact_name
        self.max_new_tokens_cap = max_new_tokens_cap
        self.default_prompt = default_prompt or "The theory of relativity states that"
        self.lock = threading.RLock()  # the state: short holds only
        self._disk = threading.Lock()  # saves and loads, one at a time
        self._tok_lock = threading.Lock()
        self._check_tok = copy.deepcopy(tok)  # request validation never shares the worker's tokenizer
        self.worker = ModelWorker(max_queue)
        self._versions = itertools.count(1)
        self.version = next(self._versions)
        self.loaded_version = self.version
        self.loaded_coeffs = self.bank.coefficients.detach().clone()
        self.loaded_walls = list(self.bank.walls)
        self.history: list[UndoRecord] = []
        self._cache: OrderedDict = OrderedDict()
        self._drafts: dict[tuple[str, int], list[int]] = {}  # last continuation per (prompt, n); worker only
        self._problems: dict[tuple, str | None] = {}  # (name, config mtime, size) -> why it cannot be read
        self.saves = 0
        # Build (first time, ~1 min) or load the compiled surface kernels now, while the model is
        # loading anyway, so that the page's first request does not wait for a compiler.

        ext.get()

    # ---- helpers -------------------------------------------------------------------------------------
    def _get(self, key):
        with self.lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            return None

    def _put(self, key, val) -> None:
        with self.lock:
            self._cache[key] = val
            while len(self._cache) > 64:
                self._cache.popitem(last=False)

    def check_prompt(self, prompt: str | None) -> str:
        prompt = self.default_prompt if prompt is None else prompt
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt must be a non-empty string")
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("prompt is not valid Unicode text (it contains a lone surrogate)") from None
        with self._tok_lock:
            n = len(self._check_tok(prompt, add_special_tokens=False).input_ids)
        if n > MAX_PROMPT_TOKENS:
            raise ValueError(f"prompt has {n} tokens; the studio accepts at most {MAX_PROMPT_TOKENS}")
        return prompt

    def check_new_tokens(self, n) -> int:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= self.max_new_tokens_cap:
            raise ValueError(f"max_new_tokens must be an integer in 1–{self.max_new_tokens_cap} (got {n!r})")
        return n

    def check_effect(self, opts: dict | EffectBody | None) -> tuple[str, int, str]:
        """Validate an effect request ``{prompt, max_new_tokens, reference}`` (:class:`EffectBody`, then the
        prompt and the generation cap; changes nothing)."""
        e = parse(EffectBody, {} if opts is None else opts,
                  "effect must be an object {prompt, max_new_tokens, reference}")
        return self.check_prompt(e.prompt), self.check_new_tokens(e.max_new_tokens), e.reference

    # ---- the model worker's side ---------------------------------------------------------------------
    def _use(self, runtime, coeffs: torch.Tensor, walls: list | None = None) -> None:
        """Worker only: put ``coeffs`` (and ``walls``, unless None) into the runtime bank and make sure it is
        the model's bank."""
        import geosteer.manifold as M

        if M.attached_bank(self.model) is not runtime:
            M.install(self.model, bank=runtime)
        with torch.no_grad():
            runtime.coefficients.copy_(coeffs)
        if walls is not None and [w.describe() for w in runtime.walls] != [w.describe() for w in walls]:
            runtime.set_walls(copy.deepcopy(list(walls)))
        runtime.clear_cache()

    def _check_forward(self, runtime, name: str) -> None:
        """Worker only: refuse a bank whose numbers overflow the forward (probe input; before it is the state)."""

        self._use(runtime, runtime.coefficients.detach().clone())
        if not probe_ok(self.model):
            raise overflow_error(f"artifact '{name}'")

    @torch.no_grad()
    def model_text(self, prompt: str) -> str:
        """``prompt`` as the model reads it: through the chat template when the session is a chat session."""

        return format_prompt(self.tok, prompt, self.chat, self.system)

    def _run_state(self, prompt: str, n: int) -> dict:
        """Greedy continuation and the next-token log-probs of the runtime coefficients.

        Decoding checks the last continuation computed for this prompt as a draft in one pass
        (:func:`geosteer.eval.generation.greedy_with_draft`): the tokens are those of plain greedy decoding,
        and an edit that leaves the first k tokens unchanged skips about k decoding steps.
        """

        ids = prompt_ids(self.tok, self.model_text(prompt)).to(input_device(self.model))
        new, first = greedy_with_draft(self.model, self.tok, ids, n, self._drafts.get((prompt, n)))
        if len(self._drafts) > 64:
            self._drafts.clear()
        self._drafts[(prompt, n)] = new
        logp = torch.log_softmax(first.float(), dim=-1)
        top = torch.topk(logp, 10)
        return {"text": self.tok.decode(new, skip_special_tokens=True), "token_ids": new, "logp": logp,
                "top": [{"token": self.tok.decode([int(i)]), "id": int(i), "p": float(v.exp())}
                        for v, i in zip(top.values, top.indices, strict=True)]}

    def _results(self, runtime, states: list[_State], prompt: str, n: int) -> list[dict]:
        out = []
        for st in states:
            val = st.value if st.value is not None else self._get(st.key)
            if val is None:
                self._use(runtime, st.coeffs, st.walls)
                val = self._run_state(prompt, n)
                self._put(st.key, val)
            out.append(val)
        return out

    # ---- info ----------------------------------------------------------------------------------------
    def info(self) -> dict:
        with self.lock:
            c = self.bank.coefficients
            layers = S.bank_layers(self.bank)
            d = {"model": self.model_name, "artifact": self.artifact_name, "layers": layers,
                 "heads": int(c.shape[1]), "dims": int(c.shape[2]), "K": int(c.shape[-1]),
                 "ranges": {str(lay): S.layer_range(self.bank, lay) for lay in layers},
                 "version": self.version, "history": [r.spec.describe() for r in self.history],
                 "walls": [w.describe() for w in getattr(self.bank, "walls", [])],  # exact region walls
                 "max_new_tokens_cap": self.max_new_tokens_cap, "default_prompt": self.default_prompt,
                 "chat": self.chat}
        d["queue"] = self.worker.depth()
        d["artifacts"] = self.list_artifacts()
        d["broken"] = self.list_broken()
        return d

    # ---- effects -------------------------------------------------------------------------------------
    def _plan(self, which: str, prompt: str, n: int) -> _State:
        """Under the lock: the cache key of state ``which`` and (if not cached) a copy of its coefficients."""
        c = self.bank.coefficients.detach()
        walls = list(self.bank.walls)
        if which == "now":
            key, coeffs = (self.version, prompt, n), c
        elif which == "loaded":
            key, coeffs, walls = (self.loaded_version, prompt, n), self.loaded_coeffs, self.loaded_walls
        elif which == "none":
            key, coeffs, walls = ("none", prompt, n), None, []
        elif not self.history:  # previous, with nothing to go back to: the current state
            return self._plan("now", prompt, n)
        else:
            rec = self.history[-1]
            key, coeffs = (rec.version_before, prompt, n), c.clone()
            coeffs[rec.index] = rec.old
            if rec.walls is not None:
                walls = list(rec.walls)
        if key in self._cache:
            self._cache.move_to_end(key)
            return _State(key, None, self._cache[key])
        if coeffs is None:
            return _State(key, torch.zeros_like(c), walls=walls)
        return _State(key, coeffs.clone(), walls=walls)

    def _effect_job(self, prompt: str, n: int, reference: str) -> tuple[int, object, list[_State]]:
        with self.lock:
            return self.version, self._runtime, [self._plan(reference, prompt, n), self._plan("now", prompt, n)]

    def _effect_result(self, version, runtime, states, prompt, n, reference, t0) -> dict:

        before, after = self._results(runtime, states, prompt, n)
        kl = kl_divergence(before["logp"], after["logp"])
        strip = ("logp",)
        return {"prompt": prompt, "reference": reference, "version": version, "kl": kl,
                "changed": before["token_ids"] != after["token_ids"],
                "first_divergence": first_divergence(before["token_ids"], after["token_ids"]),
                "before": {k: v for k, v in before.items() if k not in strip},
                "after": {k: v for k, v in after.items() if k not in strip},
                "seconds": round(time.perf_counter() - t0, 4)}

    def submit_effect(self, opts: dict | None = None, *, ticket=None) -> Future:
        """Validate, then queue the effect of the current state (a done future when it is cached)."""
        prompt, n, reference = self.check_effect(opts)
        t0 = time.perf_counter()
        version, runtime, states = self._effect_job(prompt, n, reference)
        return self._submit(version, runtime, states, prompt, n, reference, t0, ticket)

    def _submit(self, version, runtime, states, prompt, n, reference, t0, ticket) -> Future:
        job = lambda: self._effect_result(version, runtime, states, prompt, n, reference, t0)  # noqa: E731
        if all(s.coeffs is None for s in states):  # both cached: no model pass, no queue
            if ticket is not None:
                ticket.cancel()
            return done(job())
        return (ticket or self.worker.reserve("generate")).submit(job)

    def effect(self, prompt: str | None = None, max_new_tokens: int = 20, reference: str = "loaded") -> dict:
        """Greedy continuation + top-10 now and in the reference state, and KL(P_ref ‖ P_now)."""
        return self.submit_effect({"prompt": prompt, "max_new_tokens": max_new_tokens,
                                   "reference": reference}).result()

    # ---- edits ---------------------------------------------------------------------------------------------
    def edit(self, body: dict, effect: dict | None = None) -> tuple[EditSpec, int, Future | None]:
        """Validate the whole request (edit and effect) and reserve a generation place, then apply the edit
        and queue its effect; nothing changes when any part is invalid or the queue is full."""
        if not isinstance(body, dict):
            raise ValueError("edit must be a JSON object")
        opts = self.check_effect(effect) if effect is not None else None
        ticket = self.worker.reserve("generate") if opts is not None else None
        t0 = time.perf_counter()
        try:
            with self.lock:
                spec = parse_edit(body, tuple(self.bank.coefficients.shape), S.bank_layers(self.bank))
                rec = apply_edit(self.bank, spec, self.version)
                if not torch.isfinite(self.bank.coefficients.detach()[rec.index]).all():
                    undo_edit(self.bank, rec)  # exact: old block and bank.history restored
                    raise ValueError(f"{spec.describe()} would make coefficients non-finite (overflow); "
                                     "nothing was changed")
                self.history.append(rec)
                if len(self.history) > MAX_HISTORY:
                    self.history.pop(0)
                self.version = next(self._versions)
                version = self.version
                job = self._effect_job(*opts) if opts is not None else None
        except BaseException:
            if ticket is not None:
                ticket.cancel()
            raise
        if job is None:
            return spec, version, None
        try:
            fut = self._submit(*job, *opts, t0, ticket)
        except NonFiniteLogits:
            self._take_back(rec, version)
            raise
        return spec, version, self._unless_overflow(fut, rec, version)

    def _unless_overflow(self, fut: Future, rec: UndoRecord, version: int) -> Future:
        """``fut``, except that an edit whose effect overflows (non-finite logits) is taken back before the
        error is answered: the answer is an error, so the state stays what it was."""
        out: Future = Future()

        def relay(f: Future) -> None:
            err = f.exception()
            if err is None:
                out.set_result(f.result())
                return
            if isinstance(err, NonFiniteLogits):
                self._take_back(rec, version)
            out.set_exception(err)

        fut.add_done_callback(relay)
        return out

    def _take_back(self, rec: UndoRecord, version: int) -> None:
        """Undo edit ``rec`` if it is still the last change (state ``version``); the version goes back too."""
        with self.lock:
            if self.version == version and self.history and self.history[-1] is rec:
                self.history.pop()
                undo_edit(self.bank, rec)
                self.version = rec.version_before

    def undo(self) -> str | None:
        with self.lock:
            if not self.history:
                return None
            rec = self.history.pop()
            undo_edit(self.bank, rec)
            self.version = rec.version_before
            return rec.spec.describe()

    # ---- artifacts ---------------------------------------------------------------------------------------
    def list_broken(self) -> list[dict]:
        """Workspace folders with a config the studio cannot read, with the reason (:mod:`.workspace`)."""
        return folder.list_broken(self.workspace, self._problems)

    def list_artifacts(self) -> list[str]:
        return folder.list_artifacts(self.workspace)

    def save(self, name: str, overwrite: bool = False) -> dict:
        """Save the current surfaces as workspace/<name> (atomic: a complete artifact or none). The state is
        copied under the lock and written outside it, so edits and reads do not wait for the disk."""
        if not isinstance(overwrite, bool):
            raise ValueError("overwrite must be true or false")
        target = safe_child(self.workspace, name, "artifact name")
        if name.lower() in RESERVED:
            raise OutputRefused(f"'{name}' is the workspace folder of study results the studio serves; "
                                "choose another name")
        with self._disk:
            check_output_folder(target, bankio.FORMAT, overwrite=overwrite, what=f"artifact '{name}':")
            with self.lock:
                snap, version = clone_bank(self.bank), self.version
            bankio.save(snap, target)
            self.saves += 1
        return {"name": name, "digest": coeff_digest(snap.coefficients), "version": version}

    def load(self, name: str) -> dict:
        """Make workspace/<name> the state (read and checked outside the lock; history cleared)."""
        path = safe_child(self.workspace, name, "artifact name")
        with self._disk:
            if not bankio.is_artifact(path):
                have = ", ".join(self.list_artifacts()) or "none"
                raise GeosteerError(f"no artifact '{name}' in the workspace (have: {have})")
            new = bankio.read(self.model, path)
        runtime = clone_bank(new)
        self.worker.reserve("generate").submit(lambda: self._check_forward(runtime, name)).result()
        with self.lock:
            self.bank, self._runtime = new, runtime
            self.artifact_name = name
            self.history.clear()
            self.version = next(self._versions)
            self.loaded_version = self.version
            self.loaded_coeffs = self.bank.coefficients.detach().clone()
            self.loaded_walls = list(self.bank.walls)
            self._cache.clear()
            return {"name": name, "digest": coeff_digest(self.bank.coefficients), "version": self.version}


def coeff_digest(c: torch.Tensor) -> str:
    """sha256 of the coefficient bytes (fp32, contiguous): equal digests mean identical surfaces."""
    return hashlib.sha256(c.detach().float().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]
