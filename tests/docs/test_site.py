"""The docs site (mkdocs.yml: mkdocs-material + mkdocstrings) builds with ``--strict``.

Strict mode turns every warning into a failure: a link to a missing page, a missing anchor
(``validation: anchors: warn``), a docs file left out of the nav, or a mkdocstrings reference that does not
resolve. The README is the home page (docs/_hooks.py), so its links are checked too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="needs the docs tools (dev or docs extra)")
pytest.importorskip("material", reason="needs mkdocs-material (dev or docs extra)")
pytest.importorskip("mkdocstrings_handlers.python", reason="needs mkdocstrings[python] (dev or docs extra)")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return out


UNPUBLISHED: set[str] = set()  # pages kept out of the site (mkdocs.yml exclude_docs)


def test_site_builds_strictly_with_every_page(site):
    for page in ("index.html", "concepts/index.html", "guide-manifold/index.html", "ARCHITECTURE/index.html",
                 "examples/index.html", "manifold-study/index.html", "your-model/index.html",
                 "api/manifold/index.html"):
        assert (site / page).is_file(), page
    # every docs/*.md page is in the site (none silently excluded), except the unpublished ones
    for md in (ROOT / "docs").glob("*.md"):
        assert (site / md.stem / "index.html").is_file() == (md.name not in UNPUBLISHED), md.name


def test_navigation_leads_a_newcomer_from_get_started_to_the_developer_pages():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    sections = [next(iter(entry)) for entry in nav]
    assert sections == ["Get started", "Concepts", "Method guides", "Studies", "API reference", "Developer"]
    guides = {page for entry in nav[2]["Method guides"] for page in entry.values()}
    assert {"guide-manifold.md", "guide-directional.md", "guide-dynamics.md", "vectors.md"} <= guides
    listed = str(nav)
    assert not any(page in listed for page in UNPUBLISHED)
    concepts = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    for heading in ("## Anatomy and hook points", "## Interventions and `steer`", "## Methods and recipes",
                    "## Artifacts and the Hub"):
        assert heading in concepts, heading


def test_home_page_is_the_readme_with_working_links(site):
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "Geometric steering and analysis" in html
    links = set(re.findall(r'href="([a-zA-Z][\w.-]*/)"', html))
    assert {"directional/", "manifold-study/", "concepts/"} <= links
    for link in links:
        assert (site / link / "index.html").is_file(), link
    assert 'src="studio.png"' in html and (site / "studio.png").is_file()


def test_api_reference_renders_the_public_api(site):
    def ids(page: str) -> set[str]:
        return set(re.findall(r'id="(geosteer[\w.]*)"', (site / "api" / page / "index.html").read_text("utf-8")))

    assert {"geosteer.load_model", "geosteer.steer", "geosteer.anatomy", "geosteer.load"} <= ids("geosteer")
    assert {"geosteer.interventions.steer", "geosteer.interventions.AddVector"} <= ids("interventions")
    assert {"geosteer.manifold.SurfaceBank.save", "geosteer.manifold.load", "geosteer.manifold.save",
            "geosteer.manifold.edit.parse_edit"} <= ids("manifold")
    assert {"geosteer.directional.ComponentScale", "geosteer.directional.measure_text"} <= ids("directional")
    assert {"geosteer.dynamics.FFNVariant", "geosteer.dynamics.diagnose"} <= ids("dynamics")
    assert {"geosteer.methods.load_artifact", "geosteer.recipe.InterventionSpec",
            "geosteer.recipe.InterventionSpec.save"} <= ids("methods")


def test_sphinx_roles_in_docstrings_render_as_code(site):
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from _hooks import drop_sphinx_roles, readme_as_index
    finally:
        sys.path.remove(str(ROOT / "docs"))
    assert drop_sphinx_roles("see :func:<code>geosteer.steer</code> and :class:<code>~a.b.Bank</code>") == \
        "see <code>geosteer.steer</code> and <code>Bank</code>"
    assert readme_as_index("[a](docs/x.md) [b](https://e.org/docs/y)") == "[a](x.md) [b](https://e.org/docs/y)"
    for page in (site / "api").glob("*/index.html"):
        assert not re.search(r":(func|class|mod|meth|attr):<code>", page.read_text("utf-8")), page
