from geosteer.data import corpus


def test_split_is_deterministic_disjoint_and_by_article():
    arts = corpus.articles()
    assert len(arts) > 9000
    train = corpus.split_texts("train")
    held = corpus.split_texts("heldout")
    assert len(train) + len(held) == len(arts)
    assert 0.03 < len(held) / len(arts) < 0.08
    assert not set(train) & set(held) or len(set(train) & set(held)) < 3  # identical extracts are rare
    titles_held = {a.title for a in arts if corpus.split_of(a.title) == "heldout"}
    titles_train = {a.title for a in arts if corpus.split_of(a.title) == "train"}
    assert not titles_held & titles_train
    assert corpus.split_texts("heldout") == held  # stable


def test_split_text_and_bad_split():
    import pytest

    from geosteer.errors import GeosteerError

    t = corpus.split_text("heldout", max_chars=1000)
    assert len(t) == 1000
    with pytest.raises(GeosteerError, match="heldout"):
        corpus.split_texts("validation")
