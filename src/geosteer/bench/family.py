"""A family of levers measured as one lever: its candidate points are every point of its members, and the
one operating-point rule (:func:`geosteer.bench.operating.choose_operating_point`, validation prompts only,
the control-KL budget) chooses among all of them at once.

``surfaces-best`` is the family of the learned steering surfaces (the first form and its variants): the
fair answer to "which form of the surfaces, at which strength" for a concept, since the form is chosen on
the validation prompts like any strength, never on the test prompts.

The members are run as levers of their own (and checkpointed); the family reads their validation curves,
chooses, and takes the test measurement of the chosen point. That point is the chosen member's own
operating point whenever the rule's order picks it (the rule takes the first best of the union, and each
member's own choice is the first best of its part); otherwise the member is built again and the chosen
point is measured on the test prompts (``measure``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import geosteer.bench.levers_learned  # noqa: F401 - registers the members (before the family)
import geosteer.bench.levers_variants  # noqa: F401
from geosteer.bench.operating import choose_operating_point
from geosteer.bench.registry import Lever, Prepared, Setup, register_lever
from geosteer.errors import GeosteerError

SURFACE_FAMILY = ("surfaces", "surfaces-rank1", "surfaces-rank2", "surfaces+vector", "surfaces-kl",
                  "surfaces-layers")
SUMMARY_KEYS = ("concept_score", "fluency", "control_kl", "score", "n_prompts", "n_controls")


def union_curve(curves: Sequence[Sequence[dict]]) -> tuple[list[dict], list[tuple[int, int]]]:
    """The family's candidates on the validation prompts: the stock point (each member's first) once, then
    every member's other points in member order; beside them (member position, index in its curve)."""
    if not curves or any(not c for c in curves):
        raise ValueError("every member needs its validation curve (the stock point first)")
    union, where = [curves[0][0]], [(0, 0)]
    for k, curve in enumerate(curves):
        union += curve[1:]
        where += [(k, j) for j in range(1, len(curve))]
    return union, where


def family_record(name: str, members: Sequence[str], docs: dict[str, dict], stock_row: dict, kl_budget: float,
                  measure: Callable[[str, int], dict] | None = None) -> dict | None:
    """The family's checkpoint record (``row`` and ``curve``) from its members' records (``docs``: member ->
    {row, curve}). ``measure(member, index)``: the test row of a member's candidate that is not its own
    operating point (None: such a choice returns None, nothing is measured)."""
    union, where = union_curve([docs[m]["curve"] for m in members])
    u = choose_operating_point(union, kl_budget)
    k, j = where[u]
    member = members[k]
    own = docs[member]["row"]
    if j == 0:
        base, params = stock_row, 0
    elif own["operating_point"]["index"] == j:
        base, params = own, own["params"]
    elif measure is None:
        return None
    else:
        base, params = measure(member, j), own["params"]
    op = {k2: v for k2, v in base["operating_point"].items() if k2 != "index"}
    row = {"concept": own["concept"], "lever": name, "strength": base["strength"],
           "operating_point": {"index": u, "member": member if j else "stock", **op},
           **{key: base[key] for key in SUMMARY_KEYS if key in base}, "params": params,
           "info": {"member": member if j else "stock", "member_index": j, "members": list(members),
                    "member_params": {m: docs[m]["row"]["params"] for m in members}},
           "seconds": round(sum(docs[m]["row"].get("seconds", 0.0) for m in members)
                            + base.get("seconds", 0.0) * (base is not own and base is not stock_row), 1),
           "cpu_seconds": round(sum(docs[m]["row"].get("cpu_seconds", 0.0) for m in members)
                                + base.get("cpu_seconds", 0.0) * (base is not own and base is not stock_row), 1),
           "examples": base.get("examples", [])}
    curve = [{**c, "lever": name, "member": members[kk] if jj else "stock"}
             for c, (kk, jj) in zip(union, where, strict=True)]
    return {"row": row, "curve": curve}


def _not_built(setup: Setup) -> Prepared:
    raise GeosteerError("a family of levers is not built: the benchmark runs its members and chooses among them")


def register_family(name: str, members: Sequence[str], description: str) -> Lever:
    """Register a family lever over registered levers ``members``."""
    return register_lever(Lever(name, _not_built, description, members=tuple(members)))


register_family("surfaces-best", SURFACE_FAMILY, "the learned surfaces' forms as one lever: form and strength "
                "chosen together on validation")
