"""The compiled-graph steering tables (``serve.graph``) against the recipes' own edit functions, no engine.

Every residual recipe kind of ``test_compiled.py`` (vectors at each hook point in every mode and phase and with
``vector_from``, ∥/⊥ scaling at the residual sites, learned scales, FFN variants, gains, a parallel layer, two
inline recipes) gets a table row; one flat batch whose rows belong to the different recipes and to the stock
model runs every layer's stages, and must equal each recipe's edit functions applied to its rows alone.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from tests.serve.test_compiled import INLINE, recipe_dirs, tiny, vector_dirs  # noqa: E402, F401 (fixtures)


def test_tables_equal_the_edit_functions_on_mixed_rows(tiny, recipe_dirs, vector_dirs):  # noqa: F811
    """Every recipe's stages, run from the tables on one flat batch whose rows belong to different recipes (and
    the stock model), equal each recipe's own edit functions applied to its rows alone."""
    from geosteer.served import POINTS, Tokens
    from geosteer_vllm import graph
    from geosteer_vllm.inline import Policy, canonical, plan_inline
    from geosteer_vllm.plan import meta_model, plan_recipe

    meta = meta_model(tiny[0].config)
    meta.config._geosteer_name = "tiny-llama"
    plans = [plan_recipe(n, d, meta) for n, d in recipe_dirs.items() if n != "surfaces"]
    plans = [p for p in plans if not p.neutral and not p.attention_layers]
    plans += [plan_inline(canonical(doc, Policy(vector_dirs)), meta) for doc in INLINE.values()]
    assert all(graph.why_not(p) is None for p in plans)
    n_layers, d = meta.config.num_hidden_layers, meta.config.hidden_size
    stages = graph.stages_of(plans, n_layers, inline=False)
    rows = graph.Rows(64, plans, 0, torch.device("cpu"))
    tabs = {i: graph.LayerTables({p: stages.get((i, p), 0) for p in POINTS}, rows.size, d, torch.float32, "cpu")
            for i in range(n_layers)}
    rows.tables = tabs
    for p in plans:
        rows.write(rows.named[id(p)], p)
    gen = torch.Generator().manual_seed(1)
    per = [(None, 3, 4), *[(p, 3, 4) for p in plans]]  # 3 tokens each: positions 2, 3, 4 (prompt of 4)
    rows.fill(per)
    n = 3 * len(per)
    pos = torch.tensor([2, 3, 4] * len(per))
    tokens = Tokens(pos, torch.full((n,), 4))
    state = {"resid_pre": torch.randn(n, d, generator=gen), "mlp_in": torch.randn(n, d, generator=gen)}
    for i in range(n_layers):
        for point in POINTS:
            t = torch.randn(n, d, generator=gen)
            got = tabs[i].run(point, t, state, rows.rows[:n], pos, pos < rows.prompt_len[:n])
            want = t.clone()
            for k, (plan, _, _) in enumerate(per):
                sl = slice(3 * k, 3 * k + 3)
                ops = None if plan is None else plan.layers.get(i)
                sub, st = t[sl], {key: v[sl] for key, v in state.items()}
                for fn in [] if ops is None else getattr(ops, point):
                    sub = fn(sub, st, tokens[torch.arange(3 * k, 3 * k + 3)])
                want[sl] = sub
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"layer {i} {point}")
            assert torch.equal(got[:3], t[:3])  # the stock rows are untouched, bit for bit


def test_what_the_tables_cannot_hold_is_named():
    """Operations inside attention and edits without a closed form keep a recipe on the eager path; an inline
    recipe with more edits at a point than the engine's stages is refused in one line."""
    from geosteer.errors import GeosteerError
    from geosteer.served import Form, ServedOps, ValueScale
    from geosteer_vllm import graph
    from geosteer_vllm.plan import RecipePlan

    ops = ServedOps(3, d_model=8)
    ops.attention(1, ValueScale(0.5, 1.0, None, False))
    assert "inside attention" in graph.why_not(RecipePlan("v", "v", {1: ops.layers[1]}))
    ops = ServedOps(3, d_model=8)
    ops.edit(2, "resid_post", lambda t, st, tok: t * 2)
    assert "declares no closed form" in graph.why_not(RecipePlan("f", "f", {2: ops.layers[2]}))
    ops = ServedOps(3, d_model=8)
    ops.edit(0, "resid_pre", lambda t, st, tok: t * 2, Form(2.0, 2.0))
    assert "gain" in graph.why_not(RecipePlan("g", "g", {0: ops.layers[0]}))
    ops = ServedOps(3, d_model=8)
    for _ in range(2):
        ops.edit(0, "attn_out", lambda t, st, tok: t * 2, Form(2.0, 2.0))
    plan = RecipePlan("two", "two", {0: ops.layers[0]})
    assert graph.why_not(plan) is None
    assert graph.stages_of([plan], 3, inline=True)[(0, "attn_out")] == 2
    with pytest.raises(GeosteerError, match="it has 2 edits at attn_out of layer 0; this compiled engine runs 1"):
        graph.check_inline(plan, graph.stages_of([], 3, inline=True))
