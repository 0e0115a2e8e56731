"""The steering benchmark: levers (prompting, CAA, a preference-trained vector, LoRA, LoReFT, geosteer's
learned steering surfaces, walls, ∥/⊥ scales, FFN gates) on a user's model and concepts, each at its own
operating point chosen by one rule, scored by a judge that is not the model (``geosteer bench steering``)."""

from geosteer.bench.budget import BUDGETS, Budget
from geosteer.bench.catalog import DEFAULT_LEVERS, levers
from geosteer.bench.concepts import Splits, read_concepts, split_concept
from geosteer.bench.judge import Judge
from geosteer.bench.operating import choose_operating_point
from geosteer.bench.registry import Lever, Point, register_lever
from geosteer.bench.run import BenchConfig, run_bench

__all__ = ["BUDGETS", "DEFAULT_LEVERS", "BenchConfig", "Budget", "Judge", "Lever", "Point", "Splits",
           "choose_operating_point", "levers", "read_concepts", "register_lever", "run_bench", "split_concept"]
