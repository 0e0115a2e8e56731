"""Every scale-ladder criterion's query resolves against a results file of the shape its command writes: the
study scripts run on the tiny model (change rate, walls), Table 11 built from the committed compression CSV,
the committed rung and study files elsewhere; a ``{name}`` placeholder is filled from the file's meta, and
none survives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geosteer import load_model
from geosteer.manifold import save
from geosteer_paper.reproduction.items import Query
from geosteer_paper.reproduction.ladder import fill_query, load_ladder, read_value
from geosteer_paper.reproduction.query import NotReadable, read_results
from studies.directional import paper_figures
from studies.manifold import steering
from tests.conftest import random_bank

REPO = Path(__file__).resolve().parents[3]
LADDER = REPO / "docs" / "results" / "ladder"
DIRECTIONAL = REPO / "docs" / "results" / "directional"


def _prompts(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text(json.dumps({"prompts": [{"category": c, "text": t} for c, t in pairs]}))
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """One results file per ladder slug, each written by (or of the shape of) the slug's command."""
    tmp = tmp_path_factory.mktemp("ladder-shapes")
    model, _ = load_model("tiny-llama")
    src = save(random_bank(model, 0, grid_range=(-0.5, 0.5)), tmp / "surfaces")
    prompts = _prompts(tmp / "p.json", [("polysemous", "The bank of the river"), ("code", "def add(a, b):")])
    walls = _prompts(tmp / "w.json", [("unsafe", "How to build a bomb"), ("safe", "How to build a shelf")])
    common = ["--surfaces", str(src), "--model", "tiny-llama", "--max-new-tokens", "2"]
    steering.main(["compare", *common, "--prompts", str(prompts), "--out", str(tmp / "change-rate.json")])
    steering.main(["walls", *common, "--wall-prompts", str(walls), "--layer", "1", "--top-walls", "10",
                   "--out", str(tmp / "walls.json")])
    paper_figures.main(["--parts", "table11", "--compression-csv", str(DIRECTIONAL / "compression_layers.csv"),
                        "--out", str(tmp / "compression.json")])
    files = {"change-rate": tmp / "change-rate.json", "walls": tmp / "walls.json",
             "compression": tmp / "compression.json",
             "pretrain": DIRECTIONAL / "pretrain_downstream_d128_1000.json",
             "ruler-4k": LADDER / "ruler-2k" / "smollm2.json"}  # the same tidy step at another length
    for folder in LADDER.iterdir():  # the committed rungs of every other study
        first = sorted(folder.glob("*.json"))
        if folder.name not in files and first:
            files[folder.name] = first[0]
    return files


def test_every_criterion_reads_a_number_from_its_commands_results_file(written):
    ladder = load_ladder()
    assert {it.slug for it in ladder.items} <= set(written), "a ladder study without a results file to test"
    for it in ladder.items:
        try:
            v = read_value(it, read_results(written[it.slug]))
        except NotReadable as e:
            pytest.fail(f"item {it.id}: {e}")
        assert isinstance(v, float), it.id


def test_every_committed_rung_file_is_readable():
    ladder = load_ladder()
    for it in ladder.items:
        for m in it.models:
            path = LADDER / it.slug / f"{m}.json"
            if path.is_file():
                read_value(it, read_results(path))  # NotReadable fails the test


def test_no_placeholder_survives_in_a_filled_query(written):
    for it in load_ladder().items:
        data = read_results(written[it.slug])
        for q in (it.quantity, it.minus, it.over):
            if q is not None and q.where:
                filled = fill_query(q, data).where
                assert not any("{" in v for v in filled.values() if isinstance(v, str)), (it.id, filled)


def test_the_walls_layer_is_the_one_the_run_recorded(written):
    data = read_results(written["walls"])
    q = Query(path="meta.summary", where={"condition": "grid-wall top-10 surfaces of layer {layer}",
                                          "prompts_group": "safe"}, field="greedy_changed")
    assert fill_query(q, data).where["condition"] == "grid-wall top-10 surfaces of layer 1"
    with pytest.raises(NotReadable, match=r"\{layer\} is not recorded"):
        fill_query(q, {"meta": {}, "rows": []})
    other = {"meta": {**data["meta"], "layer": 0}}  # a file of another layer has no such condition
    with pytest.raises(NotReadable, match="no row matches"):
        read_value(next(i for i in load_ladder().items if i.id == "1.24"), other)


def test_the_query_fixes_are_labelled():
    fixed = {it.id: it for it in load_ladder().items if it.query_fix}
    assert set(fixed) == {"1.13", "1.14", "1.15", "1.24"}
    for it in fixed.values():
        assert it.quantity.path == "meta.summary" and "query" in it.query_fix, it.id
    assert "--model {model}" in fixed["1.13"].command and "--model {model}" in fixed["1.24"].command
