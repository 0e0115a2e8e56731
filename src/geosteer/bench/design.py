"""The design of the decisive steering benchmark, fixed before any run.

Everything a verdict depends on is here: the control-KL levels each lever is put at (the frontier, and the
two of them the decision rule reads), the sizes, the training rule of the learned levers
(:mod:`geosteer.bench.train_rule`: the pool, the mini-batch, the control-KL target, the step cap, the clipping,
the learning-rate grid and its dev concepts), and the decision rule's margin and family-wise alpha; the judges'
admission threshold is :data:`geosteer.bench.judges.ADMISSION_AUC`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

KL_LEVELS = (0.02, 0.05, 0.1, 0.2, 0.5)  # nats: control next-token KL each lever's strength is bisected to
DECISION_LEVELS = (0.05, 0.2)  # the levels the decision rule reads (each must be one of the design's levels)
MAX_LEVELS = 10
MAX_LEVEL = 5.0  # nats
TRAIN_KL = 0.1  # nats: every learned lever is trained until its own change (s = 1) reaches this control KL
EQUIVALENCE_MARGIN = 0.02  # "equivalent": the whole interval inside ±0.02 at both KL levels
ALPHA = 0.05  # family-wise, Holm over every lever pair and KL level
LR_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)  # extended by x3 steps past an edge choice (train_rule.LrSearch)
DEV_CONCEPTS = ("people", "no-people", "no-mathematics", "no-everyday-life")  # the learning rates and the step
# cap are chosen on these, never on a test concept
FILE_KINDS = ("file-promote", "file-suppress")  # a concept file's concepts (decide_concepts.file_concept)
STATE_FILE = "decide_state.json"  # marks an output folder as a decide run's (resumable)
REFERENCES = ("stock", "prompting", "lora")  # every lever is compared with each
# other forms of the surfaces, measured on request beside the matched levers (``bench decide --explore``) and
# reported apart from the verdict, in a Holm family of their own: more rank (rank 2 is twice the budget) and
# unfactorised K×K coefficients (``surfaces-full``, about 3.7 times); the value is the rank (None: full)
EXPLORATORY: dict[str, int | None] = {"surfaces-rank2": 2, "surfaces-full": None}
EXPLORATORY_REFERENCES = ("stock", "lora", "surfaces-rank1")


UNITS = ("concept", "prompt")  # what one observation of the verdict's t intervals is (Design.unit)
# the prompt-level variance components of a paired concept-score difference, read off the committed run by
# benchmarks/decide_priors.py (medians over the lever pairs and both decision levels): between the test prompts of
# a concept, and between the seeds of one prompt; a design whose unit is the prompt is sized with them
PRIOR_SD_PROMPT = 0.133
PRIOR_SD_SEED = 0.079


@dataclass(frozen=True)
class Budget:
    """What a lever reads of the design (a :class:`geosteer.bench.registry.Setup`'s ``budget``): at most
    ``train_texts`` lever texts a side, each cut to ``train_words`` words, and ``steps``, the walls learner's steps
    and the step cap of a setup without a training rule."""

    train_texts: int
    train_words: int
    steps: int


@dataclass(frozen=True)
class Design:
    """The sizes of one run (every lever gets the same)."""

    test_prompts: int = 16
    new_tokens: int = 32
    control_prompts: int = 16
    train_controls: int = 8
    train_texts: int = 32  # the pool a side that mini-batches are drawn from (train_rule.pool_pairs)
    train_words: int = 24
    steps: int = 96  # the dev phase's step cap; the test phase's is set there (train_rule.step_cap)
    batch_texts: int = 8  # texts a side per mini-batch
    train_kl: float = TRAIN_KL
    kl_every: int = 2  # steps between the s = 1 control-KL checks
    kl_tol: float = 0.1  # relative: a lever has reached the target when its KL >= (1 - tol) x target
    hinge_tau: float = 0.3  # the objective's control-KL hinge (above the target, so the target is reachable)
    grad_clip: float = 1.0
    seeds: tuple[int, ...] = (0, 1)
    kl_levels: tuple[float, ...] = KL_LEVELS
    decision_levels: tuple[float, ...] = DECISION_LEVELS
    lr_grid: tuple[float, ...] = LR_GRID
    bootstrap: int = 4000
    # variance components for the predicted minimum detectable effect (``--dry-run``): the between-concept
    # and within-concept standard deviations of a paired concept-score difference, the medians over the lever
    # pairs and both decision levels of the committed run (benchmarks/decide_priors.py: 0.0622, 0.1516); the
    # report gives the achieved MDE beside the predicted one
    prior_sd_concept: float = 0.062
    prior_sd_item: float = 0.152
    kinds: tuple[str, ...] = ()  # the kinds of bundled test concepts taken (empty: every kind; a concept file: all)
    # a design's other choices, recorded with it: "dev_concepts" (the dev concepts, default DEV_CONCEPTS),
    # "lr_grids" ({lever: its grid}, default lr_grid for every lever) and "lr_grids_from" (where they come from)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.extra.get("unit", "concept") not in UNITS:
            raise ValueError(f"a design's unit is one of {', '.join(UNITS)} (got {self.extra.get('unit')!r})")

    @property
    def unit(self) -> str:
        """The observation of the verdict's t intervals (:data:`UNITS`): "concept", the design's default (each
        concept's mean paired difference is one observation, t across the concepts), or "prompt", recorded in
        ``extra["unit"]`` (per concept, each test prompt's mean paired difference over its seeds is one
        observation, t across the prompts, :mod:`geosteer.bench.endpoints_prompt`)."""
        return str(self.extra.get("unit", "concept"))

    @property
    def file_only(self) -> bool:
        """Whether the design runs a concept file's concepts alone (its kinds are a file's)."""
        return bool(self.kinds) and all(k in FILE_KINDS for k in self.kinds)

    def dev_concepts(self) -> tuple[str, ...]:
        """The dev concepts the learning rates and the step cap are chosen on."""
        return tuple(self.extra.get("dev_concepts", DEV_CONCEPTS))

    def grid(self, lever: str) -> tuple[float, ...]:
        """The learning-rate grid of ``lever`` (its own in ``extra["lr_grids"]``, else the design's)."""
        return tuple(float(x) for x in self.extra.get("lr_grids", {}).get(lever, self.lr_grid))

    def budget(self) -> Budget:
        """The :class:`Budget` the levers read (texts, words, steps)."""
        return Budget(train_texts=self.train_texts, train_words=self.train_words, steps=self.steps)

    def to_dict(self) -> dict:
        return asdict(self)

    def rule(self, steps: int | None = None):
        """The training rule (:class:`geosteer.bench.train_rule.TrainRule`) at a step cap (default: the design's)."""
        from geosteer.bench.train_rule import TrainRule

        return TrainRule(max_steps=int(steps or self.steps), pool=self.train_texts, batch=self.batch_texts,
                         kl_target=self.train_kl, kl_every=self.kl_every, kl_tol=self.kl_tol,
                         hinge_tau=self.hinge_tau, grad_clip=self.grad_clip)


# the design of the committed run (docs/results/decide/): two KL levels, 8 + 8 texts, 8 full-batch steps, a
# three-point grid, the priors it was sized with; its tables are rebuilt with it
EARLIER = Design(train_texts=8, steps=8, batch_texts=8, kl_levels=DECISION_LEVELS, lr_grid=(1e-3, 1e-2, 1e-1),
                 prior_sd_concept=0.04, prior_sd_item=0.15)


TOPIC_KINDS = ("topic-promote", "topic-suppress")
# the learning rates the trimmed SmolLM2 run chose on its dev concepts (results/decide-trimmed/learning_rates.json)
SMOLLM2_LRS = {"vector": 1e-3, "loreft": 1 / 9000, "lora": 1 / 3000, "surfaces-rank1": 3e-2}
# the largest concept-score difference between two levers the committed run measured (CAA against prompting at
# control KL 0.2, docs/results/decide/results.json): a predicted MDE above it is reported as such by the dry run
LARGEST_MEASURED_GAIN = 0.149
# the named designs of ``bench decide --design``: "full" is the default; "trimmed" fits about 13 CPU-hours on 2
# cores: the 18 topic concepts (the ones a 135M model's judges are admitted on: sentiment, register and refusal
# have no labelled continuations there), the frontier at three levels, 32 steps of 4 passages a side, a 3-point
# learning-rate grid (extended past an edge choice like any grid); "instruct" runs a concept file's concepts alone
# (the concepts admitted on an instruction-tuned model): the decision levels only, one seed, up to 12 steps of 4
# passages, and a dev phase on the promoted dev concept alone with each learned lever's 3-point grid centred on
# SmolLM2's choice (extended past an edge choice like any grid); its claims are per concept on that model, so its
# unit is the test prompt (Design.unit), sized with the prompt-level priors: each seed draws INSTRUCT_PROMPTS test
# prompts of a concept (predicted MDE 0.130 for 2 concepts, 0.134 for 3, at one seed; 16 prompts gave 0.206 and
# 0.214, and a second seed reading the same 32 prompts only 0.122 and 0.125 for twice the training)
INSTRUCT_STEPS = 12
INSTRUCT_PROMPTS = 32
DESIGNS = {"full": Design(),
           "trimmed": Design(kinds=TOPIC_KINDS, kl_levels=(0.05, 0.1, 0.2), steps=32, batch_texts=4,
                             lr_grid=(3e-3, 1e-2, 3e-2)),
           "instruct": Design(test_prompts=INSTRUCT_PROMPTS, kinds=FILE_KINDS, kl_levels=DECISION_LEVELS,
                              steps=INSTRUCT_STEPS, batch_texts=4,
                              seeds=(0,), lr_grid=(3e-3, 1e-2, 3e-2),
                              extra={"unit": "prompt", "prior_sd_prompt": PRIOR_SD_PROMPT,
                                     "prior_sd_seed": PRIOR_SD_SEED, "dev_concepts": ["people"],
                                     "lr_grids": {k: [v / 3, v, v * 3] for k, v in SMOLLM2_LRS.items()},
                                     "lr_grids_from": "the trimmed SmolLM2 run's choices, x3 either side"})}


def parse_levels(text: str, option: str = "--kl-levels") -> tuple[float, ...]:
    """Comma-separated control-KL levels: each in (0, MAX_LEVEL], sorted, unique, at most MAX_LEVELS, and holding
    the decision rule's levels; else one line."""
    import math

    from geosteer.errors import GeosteerError

    try:
        levels = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise GeosteerError(f"{option} {text!r}: expected comma-separated numbers, e.g. "
                            "0.02,0.05,0.1,0.2,0.5") from None
    bad = next((x for x in levels if not (math.isfinite(x) and 0 < x <= MAX_LEVEL)), None)
    if bad is not None:
        raise GeosteerError(f"{option}: level {bad:g} is out of range; each level is in (0, {MAX_LEVEL:g}] nats")
    if len(levels) > MAX_LEVELS:
        raise GeosteerError(f"{option}: {len(levels)} levels; at most {MAX_LEVELS}")
    if list(levels) != sorted(set(levels)):
        raise GeosteerError(f"{option} {text!r}: give the levels sorted, each once")
    missing = [x for x in DECISION_LEVELS if x not in levels]
    if missing:
        raise GeosteerError(f"{option} {text!r}: must hold the decision rule's levels "
                            f"{', '.join(f'{x:g}' for x in DECISION_LEVELS)}")
    return levels

