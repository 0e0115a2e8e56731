"""Hub round trip (issue 15 item 2), offline: artifacts laid into a local cache the way huggingface_hub lays
it out (models--org--name/blobs, snapshots/<commit>/ symlinks, refs/<branch>), read back with
HF_HUB_OFFLINE=1 by repo id."""

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

from geosteer import artifacts as A
from geosteer import manifold
from geosteer.errors import ArtifactError
from geosteer.models.loading import load_model
from tests.hub_helpers import fake_hf_api

huggingface_hub = pytest.importorskip("huggingface_hub")


def lay_into_cache(folder: Path, cache: Path, repo_id: str, branch: str = "main") -> str:
    """Copy ``folder`` into ``cache`` as huggingface_hub stores a downloaded model repo; return the commit."""
    commit = hashlib.sha1(repo_id.encode() + b"@" + branch.encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True)
    for f in folder.iterdir():
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / branch).write_text(commit)
    return commit


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # "org/name" must not exist as a local folder
    return cache


@pytest.fixture(scope="module")
def saved_bank(tmp_path_factory):
    model, _ = load_model("tiny-llama")
    bank = manifold.install(model, grid_size=5, grid_range=(-3.0, 3.0))
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g))
    manifold.uninstall(model)
    folder = manifold.save(bank, tmp_path_factory.mktemp("art") / "surf", command="geosteer learn surfaces x")
    return model, bank, folder


def test_bank_by_repo_id_offline_identical(hub_cache, saved_bank):
    model, bank, folder = saved_bank
    commit = lay_into_cache(folder, hub_cache, "someorg/tiny-surfaces")
    loaded = manifold.load(Path("someorg/tiny-surfaces"), model=model)  # CLI options arrive as Paths
    assert torch.equal(loaded.coefficients, bank.coefficients)
    assert torch.equal(loaded.lo, bank.lo) and torch.equal(loaded.hi, bank.hi)
    by_commit = manifold.load("someorg/tiny-surfaces", model=model, revision=commit)
    assert torch.equal(by_commit.coefficients, bank.coefficients)
    assert A.locate("someorg/tiny-surfaces@main").name == commit
    card = huggingface_hub.ModelCard.load(A.locate("someorg/tiny-surfaces") / "README.md")
    assert card.data.library_name == "geosteer"
    assert card.data.license == "apache-2.0"
    assert card.data.base_model is None  # tiny-llama has no Hub id; the table still names it
    assert "tiny-llama" in card.text and "geosteer learn surfaces x" in card.text


def test_branch_revision_and_errors(hub_cache, saved_bank):
    model, bank, folder = saved_bank
    lay_into_cache(folder, hub_cache, "someorg/tiny-surfaces", branch="v1")
    assert torch.equal(manifold.load("someorg/tiny-surfaces@v1", model=model).coefficients, bank.coefficients)
    with pytest.raises(ArtifactError) as e:
        manifold.load("someorg/tiny-surfaces", model=model)  # no refs/main in this cache
    assert "\n" not in str(e.value) and "not in the local Hub cache" in str(e.value)
    with pytest.raises(ArtifactError, match=r"revision 'nope'.*not in the local Hub cache"):
        manifold.load("someorg/tiny-surfaces", revision="nope")
    with pytest.raises(ArtifactError, match="Hub repo other/missing is not in the local Hub cache"):
        manifold.load("other/missing")
    with pytest.raises(ArtifactError, match="Hub repo other/missing"):
        A.locate("other/missing")
    # a local folder with a repo-id-like name wins over the Hub
    local = Path("someorg") / "tiny-surfaces"
    shutil.copytree(folder, local)
    assert A.locate("someorg/tiny-surfaces") == local
    # and a name under an existing local folder is a missing local path, not a Hub repo (no Hub lookup)
    assert not A.is_repo_id("someorg/typo") and A.locate("someorg/typo") == Path("someorg/typo")
    with pytest.raises(ArtifactError, match="no surfaces artifact at someorg/typo"):
        manifold.load("someorg/typo")


def test_gates_and_recipe_by_repo_id(hub_cache, saved_bank, tmp_path):
    from geosteer.dynamics.gates import FFNGates, load_gates

    model, _, _ = saved_bank
    gates = FFNGates.for_model(model, layers=[0, 2], init=0.5)
    with torch.no_grad():
        gates.alpha.copy_(torch.tensor([0.25, 1.75]))
    gfolder = gates.save(tmp_path / "g")
    lay_into_cache(gfolder, hub_cache, "someorg/tiny-gates")
    back = load_gates("someorg/tiny-gates", model=model)
    assert torch.equal(back.alpha, gates.alpha) and back.layers == [0, 2]
    assert huggingface_hub.ModelCard.load(A.locate("someorg/tiny-gates") / "README.md").data.library_name == \
        "geosteer"


def test_card_base_model_is_the_hub_id_and_parses(tmp_path):
    text = A.render_model_card(method="manifold.surfaces", base_model="smollm2", command="make x",
                               ppl_before=12.5, ppl_after=12.25, datasets=["wikimedia/wikipedia"])
    (tmp_path / "README.md").write_text(text)
    card = huggingface_hub.ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert card.data.datasets == ["wikimedia/wikipedia"]
    assert "12.2500" in card.text and "make x" in card.text


def test_push_checks_before_any_network(tmp_path):
    with pytest.raises(ArtifactError, match="not a geosteer artifact"):
        A.push(tmp_path, "org/name")
    (tmp_path / A.CONFIG_NAME).write_text("{}")
    with pytest.raises(ArtifactError, match="not a Hub repo id"):
        A.push(tmp_path, "not a repo")


def test_shipped_surfaces_have_a_hub_card(tmp_path):
    from geosteer.manifold.hub import write_card

    shipped = Path(__file__).resolve().parents[2] / "artifacts" / "smollm2-surfaces"
    card = huggingface_hub.ModelCard.load(shipped / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert card.data.library_name == "geosteer" and card.data.license == "apache-2.0"
    # the card is what write_card renders from the artifact's own config (regenerated, not hand-edited)
    copy = tmp_path / "s"
    shutil.copytree(shipped, copy)
    (copy / "README.md").unlink()
    write_card(copy)
    assert (copy / "README.md").read_text() == (shipped / "README.md").read_text()


def test_bank_push_to_hub_uploads_a_loadable_folder(monkeypatch, saved_bank, hub_cache, tmp_path):
    """push_to_hub with the Hub API replaced by a recorder: what would be uploaded, laid into a cache, loads
    back to the same coefficients and carries a parseable card."""
    model, bank, _ = saved_bank
    calls = {}
    FakeApi = fake_hf_api(calls, tmp_path / "uploaded")

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.delenv("HF_HUB_OFFLINE")  # pushing is refused offline; the recorder never reaches the network
    url = bank.push_to_hub("someorg/pushed", revision="v2", token="t")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # loading back reads the cache only
    assert url == "https://huggingface.co/someorg/pushed"
    assert calls["repo"] == ("someorg/pushed", True) and calls["branch"] == "v2" and calls["revision"] == "v2"
    lay_into_cache(tmp_path / "uploaded", hub_cache, "someorg/pushed", branch="v2")
    back = manifold.load("someorg/pushed@v2", model=model)
    assert torch.equal(back.coefficients, bank.coefficients)
    assert huggingface_hub.ModelCard.load(A.locate("someorg/pushed@v2") / "README.md").data.library_name == \
        "geosteer"
