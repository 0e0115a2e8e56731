"""The design of the decisive steering benchmark, fixed before any run.

Everything a verdict depends on is here: the control-KL levels each lever is put at, the sizes, the
learning-rate grid and its dev concepts, and the decision rule's margin and family-wise alpha
(:func:`geosteer.bench.stats.decide`); the judges' admission threshold is
:data:`geosteer.bench.judges.ADMISSION_AUC`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from geosteer.bench.budget import Budget

KL_LEVELS = (0.05, 0.2)  # nats: control next-token KL each lever's strength is bisected to
EQUIVALENCE_MARGIN = 0.02  # "equivalent": the whole interval inside ±0.02 at both KL levels
ALPHA = 0.05  # family-wise, Holm over every lever pair and KL level
LR_GRID = (1e-3, 1e-2, 1e-1)
DEV_CONCEPTS = ("people", "no-people")  # the learning rates are chosen on these, never on a test concept
STATE_FILE = "decide_state.json"  # marks an output folder as a decide run's (resumable)
REFERENCES = ("stock", "prompting", "lora")  # every lever is compared with each
# other forms of the surfaces, measured on request beside the matched levers (``bench decide --explore``) and
# reported apart from the verdict, in a Holm family of their own: more rank (rank 2 is twice the budget) and
# unfactorised K×K coefficients (``surfaces-full``, about 3.7 times); the value is the rank (None: full)
EXPLORATORY: dict[str, int | None] = {"surfaces-rank2": 2, "surfaces-full": None}
EXPLORATORY_REFERENCES = ("stock", "lora", "surfaces-rank1")


@dataclass(frozen=True)
class Design:
    """The sizes of one run (every lever gets the same)."""

    test_prompts: int = 16
    new_tokens: int = 32
    control_prompts: int = 16
    train_controls: int = 8
    train_texts: int = 8
    train_words: int = 24
    steps: int = 8
    seeds: tuple[int, ...] = (0, 1)
    kl_levels: tuple[float, ...] = KL_LEVELS
    lr_grid: tuple[float, ...] = LR_GRID
    bootstrap: int = 4000
    # variance components for the predicted minimum detectable effect (``--dry-run``): the between-concept
    # and within-concept standard deviations of a paired score difference, read off the earlier benchmark's
    # committed per-lever results (its TF-IDF judge; a rough prior, replaced by the run's own estimate)
    prior_sd_concept: float = 0.04
    prior_sd_item: float = 0.15
    extra: dict = field(default_factory=dict)

    def budget(self) -> Budget:
        """The :class:`Budget` the learned levers read (texts, words, steps, controls)."""
        return Budget("decide", validation_prompts=0, test_prompts=self.test_prompts, new_tokens=self.new_tokens,
                      control_prompts=self.control_prompts, train_controls=self.train_controls,
                      train_texts=self.train_texts, train_words=self.train_words, steps=self.steps,
                      strengths=(1.0,), caa_layers=(0.5,), caa_multipliers=(1.0,), bootstrap=self.bootstrap)

    def to_dict(self) -> dict:
        return asdict(self)

