"""geosteer_paper.registry: register_paper adds a method's studies and checks as register_study/register_check do."""

from geosteer_paper import registry
from geosteer_paper.registry import Check, Study, checks, register_paper, studies


def test_register_paper_adds_studies_and_checks_in_their_order(monkeypatch):
    monkeypatch.setitem(registry._STUDIES, "plug", {})  # restored (removed) after the test
    monkeypatch.setitem(registry._CHECKS, "plug", [])
    a, b = Study("b-study", "m:f", "Fig. 1"), Study("a-study", "m:g", "Fig. 2")
    c1, c2 = Check("9.2", "second", "m:c2", 0.0), Check("9.1", "first", "m:c1", 1e-6, ("llama",))
    register_paper("plug", (a, b), [c1, c2])
    assert studies()["plug"] == (a, b)
    assert [c for c in checks() if c.run.startswith("m:")] == [c1, c2]
    register_paper("plug", [Study("b-study", "m:h")])  # the same name again replaces it, no checks added
    assert [s.command for s in studies()["plug"]] == ["m:h", "m:g"]
    assert len(registry._CHECKS["plug"]) == 2


def test_the_built_in_papers_register_every_declared_study_and_check():
    from geosteer_paper import directional, dynamics, manifold, vectors

    got = studies()
    for name, mod in [("directional", directional), ("dynamics", dynamics), ("manifold", manifold),
                      ("vectors", vectors)]:
        assert got[name] == tuple(mod.STUDIES)
    assert checks() == [*manifold.CHECKS, *directional.CHECKS, *dynamics.CHECKS]
