"""The benchmark's judge: a text classifier that is not the steered model.

scikit-learn's TF-IDF features (word 1–2-grams and character 3–5-grams) and a logistic regression, trained
on the judge split of a concept's texts (positive = 1, negative = 0); ``prob(texts)`` is P(concept | text).
It sees only text, never the model, so a lever cannot move the judge except through what it generates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geosteer.errors import GeosteerError


class Judge:
    """P(concept | text) from TF-IDF + logistic regression (module docstring)."""

    def __init__(self, C: float = 4.0, seed: int = 0) -> None:
        self.C = float(C)
        self.seed = int(seed)
        self._pipe = None

    def fit(self, positive: Sequence[str], negative: Sequence[str]) -> Judge:
        try:
            import sklearn  # noqa: F401
        except ModuleNotFoundError:
            from geosteer.extras import MissingDependency

            raise MissingDependency("the judge needs scikit-learn, which is not installed: "
                                    "pip install 'geosteer[steering-bench]'") from None
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import FeatureUnion, make_pipeline

        if not positive or not negative:
            raise GeosteerError("the judge needs positive and negative texts")
        features = FeatureUnion([
            ("words", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, lowercase=True)),
            ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True))])
        self._pipe = make_pipeline(features, LogisticRegression(C=self.C, max_iter=2000,
                                                                random_state=self.seed))
        x = list(positive) + list(negative)
        y = np.array([1] * len(positive) + [0] * len(negative))
        self._pipe.fit(x, y)
        return self

    def prob(self, texts: Sequence[str]) -> np.ndarray:
        """P(concept | text) for each text (an empty text counts as the empty string)."""
        if self._pipe is None:
            raise GeosteerError("the judge is not trained (call fit first)")
        if not texts:
            return np.zeros(0)
        return self._pipe.predict_proba([t or "" for t in texts])[:, 1]

    def accuracy(self, positive: Sequence[str], negative: Sequence[str]) -> float:
        """Share of ``positive`` scored above 0.5 and ``negative`` below (texts it was not trained on)."""
        p, n = self.prob(list(positive)), self.prob(list(negative))
        return float(((p > 0.5).sum() + (n <= 0.5).sum()) / max(1, len(p) + len(n)))
