"""The model card of an edited surfaces artifact says what its perplexities measured and when: the training
run's numbers are labelled as measured before the edits, never shown as the edited artifact's "after"."""

from __future__ import annotations

import re

from geosteer import load_model, manifold
from geosteer.manifold.edit import apply_edit

HELD = {"split": "heldout", "context": 512, "stride": 256, "max_tokens": 32768, "ppl_before": 12.9217,
        "ppl_after": 11.5752}


def test_trained_card_then_edited_card(tmp_path):
    model, _ = load_model("tiny-llama")
    bank = manifold.install(model, layers=[0, 1])
    manifold.uninstall(model)
    trained = (manifold.save(bank, tmp_path / "trained", training={"heldout": HELD, "tokens": 4096, "steps": 8})
               / "README.md").read_text()
    assert "| held-out perplexity after | 11.5752 |" in trained
    assert "bundled corpus, heldout split, first 32,768 tokens, context 512 / stride 256, when the surfaces " \
           "were trained" in trained
    apply_edit(bank, "invert layer=1")
    edited = (manifold.save(bank, tmp_path / "edited") / "README.md").read_text()
    assert "| held-out perplexity after | n/a |" in edited  # not measured on the edited surfaces
    assert "| held-out perplexity at training, before the edits | 12.9217 → 11.5752 (not re-measured after " \
           "the edits) |" in edited
    row = next(x for x in edited.splitlines() if x.startswith("| edits (after training) |"))
    assert re.search(r"invert .*\(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", row), row  # the edit with its time
