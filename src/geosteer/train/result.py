"""What a training run returns (:class:`TrainResult`) and how it stops when it diverges."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from geosteer.errors import GeosteerError


class TrainingDiverged(GeosteerError):
    """The loss or the gradient became NaN/inf; the run stopped and kept its last good checkpoint."""


@dataclass
class TrainResult:
    steps_done: int
    total_steps: int
    tokens_seen: int
    seconds: float
    resumed_from: int | None
    stopped_early: bool
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    checkpoint: str | None = None

    @property
    def ppl_before(self) -> float | None:
        return next((e["ppl"] for e in self.evals if e["step"] == 0), None)

    @property
    def ppl_after(self) -> float | None:
        done = [e for e in self.evals if e["step"] == self.total_steps]
        return done[-1]["ppl"] if done else None

    @property
    def final_loss(self) -> float | None:
        return self.history[-1]["loss"] if self.history else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(ppl_before=self.ppl_before, ppl_after=self.ppl_after, final_loss=self.final_loss)
        return d
