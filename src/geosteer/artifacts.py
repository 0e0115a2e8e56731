"""Shared artifact conventions (PEFT-style folders), used by every trainable or editable artifact.

An artifact is a folder: ``geosteer_config.json`` (with ``format`` and an integer ``version``) + one or
more ``*.safetensors`` + a generated model card ``README.md``. The method packages own their formats
(``geosteer.manifold.artifact`` for surfaces, ``geosteer.dynamics.gates`` for FFN gates,
``geosteer.recipe`` for edit recipes); this module gives them the common parts:

- :func:`check_config` — version gate and forward-compatible reading. Convention: adding keys never bumps
  ``version`` (an older reader warns about keys it does not know and goes on); ``version`` is bumped only
  for a change an older reader would misread, and such an artifact is refused with a one-line error.
- :func:`render_model_card` / :func:`write_model_card` — README.md with Hub metadata (base model, method,
  training data and tokens, held-out perplexity before/after, the command that made it).
- :func:`write_folder_atomic` — write a whole folder through a temporary sibling + rename, never over a
  folder that is not a geosteer output of the same kind (:mod:`geosteer.outputs`, re-exported here).
- :func:`locate` / :func:`resolve` / :func:`push` — local path or Hub repo id (``org/name[@revision]``,
  ``huggingface_hub`` cache, ``HF_HUB_OFFLINE=1``; tested offline against a local cache layout).
- :func:`convert_reference_checkpoint` — the named place for an importer of the attention-manifold
  reference release, whose checkpoint layout is not documented (it raises until it is).
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from geosteer.errors import ArtifactError
from geosteer.formats import CONFIG_NAME, format_of  # noqa: F401 - re-exported from here
from geosteer.outputs import (  # noqa: F401 - the output-folder writer, re-exported from here
    check_output_folder,
    folder_kind,
    recover_folder,
    write_folder_atomic,
)

CARD_NAME = "README.md"
_log = logging.getLogger("geosteer.artifacts")

# The skeleton and the format table live in the registry (geosteer.methods), which sits above this module;
# these names are still readable from here (resolved when first asked for, so no import runs back up).
_REGISTRY_NAMES = ("ArtifactFormat", "is_artifact", "load_artifact", "register_format", "unregister_format")


def __getattr__(name: str) -> Any:
    if name in _REGISTRY_NAMES:
        import importlib

        return getattr(importlib.import_module("geosteer.methods"), name)
    raise AttributeError(f"module 'geosteer.artifacts' has no attribute '{name}'")


class ArtifactWarning(UserWarning):
    """An artifact has keys this version of geosteer does not know (written by a newer one)."""


def check_config(doc: Mapping[str, Any], *, fmt: str, reader_version: int, known_keys: Iterable[str],
                 source: str | Path = "artifact") -> list[str]:
    """Validate an artifact config: ``format`` must equal ``fmt``, ``version`` ≤ ``reader_version``.

    Then every field is checked against the format's schema (:data:`geosteer.config_schema.SCHEMAS`: types,
    bounds, unique sorted layers, the base model present). Keys outside ``known_keys`` (and outside the common
    ones) are reported with one :class:`ArtifactWarning` and returned; they never make loading fail.
    """
    from geosteer.config_schema import SCHEMAS, validate_config

    if not isinstance(doc, Mapping):
        raise ArtifactError(f"{source}: {CONFIG_NAME} must hold a JSON object, got {type(doc).__name__}")
    if doc.get("format") != fmt:
        raise ArtifactError(f"{source} is not a {fmt} artifact ({CONFIG_NAME} has format "
                            f"{str(doc.get('format'))[:80]!r}, expected {fmt!r})")
    version = doc.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ArtifactError(f"{source}: version must be an integer, got {str(version)[:40]}")
    if version > reader_version:
        raise ArtifactError(f"{source} was written by a newer geosteer ({fmt} version {version}; "
                            f"this one reads versions up to {reader_version}): upgrade geosteer to load it")
    if version < 1:
        raise ArtifactError(f"{source}: version must be >= 1, got {version}")
    if fmt in SCHEMAS:
        validate_config(doc, SCHEMAS[fmt], source)
    common = {"format", "version", "geosteer_version", "commit", "created", "card"}
    unknown = sorted(set(doc) - common - set(known_keys))
    if unknown:
        warnings.warn(f"{source}: ignoring keys unknown to this geosteer ({', '.join(unknown)}); "
                      "the artifact was probably written by a newer version", ArtifactWarning, stacklevel=2)
    return unknown


def _model_key(name: str) -> str:
    """A comparable form of a model name (:func:`geosteer.models.loading.model_key`): resolved path for local
    files/folders, an alias as its Hub id, lower-case."""
    from geosteer.models.identity import model_key

    return model_key(name)


def check_base_model(recorded: str | None, current: str | None, *, what: str = "this artifact",
                     force: bool = False) -> None:
    """Refuse an artifact made for another base model (shapes can match by chance: tiny-llama vs tiny-qwen3).

    ``recorded``: the artifact's ``base_model``; ``current``: ``geosteer.models.loading.model_id(model)``.
    Aliases and Hub ids match both ways (``smollm2`` ≡ ``HuggingFaceTB/SmolLM2-135M-Instruct``), and so does
    a base that ``current`` declares (:func:`geosteer.models.loading.declared_bases`: ``load_model(folder,
    base_model=...)``, the folder's model card ``base_model`` or its config's ``geosteer_base_model``).
    Nothing is checked when either is unknown or ``force`` is set (an explicit user override).
    """
    if force or not recorded or not current or _model_key(recorded) == _model_key(current):
        return
    from geosteer.models.identity import declared_bases

    if any(_model_key(recorded) == _model_key(b) for b in declared_bases(current)):
        return
    raise ArtifactError(f"{what} was made for base model '{recorded}', not for '{current}' (the model it is "
                        "being loaded on); load that model, declare a fine-tuned folder's base (CLI --base-model; "
                        "base_model in its README card or geosteer_base_model in its config.json; load_model(..., "
                        "base_model=...)), or pass force=True (CLI: --force) to use it anyway")


def read_config(folder: str | Path, **check: Any) -> dict:
    """Read ``folder/geosteer_config.json`` and run :func:`check_config` with ``check`` (fmt=..., ...)."""
    folder = Path(folder)
    recover_folder(folder)
    path = folder / CONFIG_NAME
    if not path.is_file():
        raise ArtifactError(f"{folder} is not a geosteer artifact (missing {CONFIG_NAME})")
    from geosteer.config_schema import read_config_json

    doc = read_config_json(path)
    if check:
        check_config(doc, source=folder, **check)
    return doc


def base_fields(fmt: str, version: int) -> dict:
    """The common header of every config: format, version, geosteer version, creation time (UTC)."""
    import datetime as _dt

    from geosteer.version import __version__

    return {"format": fmt, "version": int(version), "geosteer_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def _fmt_num(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.4f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def render_model_card(*, method: str, base_model: str, title: str | None = None, summary: str = "",
                      training: Mapping[str, Any] | None = None, ppl_before: float | None = None,
                      ppl_after: float | None = None, command: str | None = None,
                      n_parameters: int | None = None, files: Iterable[str] = (),
                      extra: Mapping[str, Any] | None = None, tags: Iterable[str] = (),
                      license: str = "apache-2.0", datasets: Iterable[str] = ()) -> str:
    """Model card text (README.md) with Hub YAML front matter (``huggingface_hub.ModelCardData``):
    ``library_name: geosteer``, ``license``, ``base_model`` as the real Hub id (``smollm2`` ->
    ``HuggingFaceTB/SmolLM2-135M-Instruct``, via :data:`geosteer.models.loading.HUB_IDS`; left out for a
    model that has none, e.g. a tiny test model), ``datasets`` (Hub dataset ids) and tags.

    ``training``: e.g. ``{"data": "bundled corpus, train split", "tokens": 300000, "steps": 300,
    "lr": 0.02, "seed": 0}``; ``ppl_before``/``ppl_after``: held-out perplexity without/with the artifact;
    ``command``: the exact command that produced it.
    """
    import yaml
    from huggingface_hub import ModelCardData

    from geosteer.models.loading import hub_id

    tag_list = list(dict.fromkeys(["geosteer", method.split(".")[0], *tags]))
    hub_base = hub_id(str(base_model))
    data = ModelCardData(library_name="geosteer", license=license,
                         base_model=hub_base if _REPO_ID.match(hub_base) else None,
                         datasets=list(datasets) or None, tags=tag_list).to_dict()
    ordered = {"library_name": data.pop("library_name"), **data}
    front = ["---", yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True).strip(), "---"]
    lines = [*front, "", f"# {title or f'{method} for {base_model}'}", ""]
    if summary:
        lines += [summary.strip(), ""]
    lines += ["| field | value |", "|---|---|", f"| method | `{method}` |",
              f"| base model | `{base_model}`" + (f" (`{hub_base}`)" if hub_base != str(base_model) else "") + " |"]
    if n_parameters is not None:
        lines.append(f"| trainable parameters | {_fmt_num(int(n_parameters))} |")
    train = dict(training or {})
    if "data" in train:
        lines.append(f"| training data | {train.pop('data')} |")
    if "tokens" in train:
        lines.append(f"| training tokens | {_fmt_num(train.pop('tokens'))} |")
    for k, v in train.items():
        lines.append(f"| {k} | {_fmt_num(v)} |")
    lines.append(f"| held-out perplexity before | {_fmt_num(ppl_before)} |")
    lines.append(f"| held-out perplexity after | {_fmt_num(ppl_after)} |")
    for k, v in (extra or {}).items():
        lines.append(f"| {k} | {_fmt_num(v)} |")
    lines.append("")
    if command:
        lines += ["## Command", "", "```bash", command.strip(), "```", ""]
    files = list(files)
    if files:
        lines += ["## Files", ""] + [f"- `{f}`" for f in files] + [""]
    lines += ["## Use", "", "```python", "import geosteer", "model, tok = geosteer.load_model("
              f"{json.dumps(str(base_model))})",
              "# load this folder with the loader of its method (see geosteer's docs), then",
              "# with geosteer.steer(model, artifact): ...", "```", ""]
    return "\n".join(lines)


def write_model_card(folder: str | Path, text: str | None = None, **card: Any) -> Path:
    """Write ``README.md`` into ``folder`` atomically: ``text`` as given, or :func:`render_model_card`."""
    from geosteer.io_utils import atomic_write_text

    body = text if text is not None else render_model_card(**card)
    return atomic_write_text(Path(folder) / CARD_NAME, body)


_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def split_repo_ref(ref: str) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ``("org/name", "rev")``; ``"org/name"`` -> ``("org/name", None)``."""
    repo, sep, rev = str(ref).partition("@")
    return repo, (rev or None) if sep else None


def is_repo_id(ref: str | Path) -> bool:
    """Whether ``ref`` is to be read as a Hub repo id (``org/name`` or ``org/name@revision``): it has that
    shape, is not an existing local path (a local folder always wins) and its ``org`` part is not an existing
    local folder either (``runs/typo`` is a missing local folder, not a Hub repo)."""
    if Path(str(ref)).expanduser().exists():  # a Path is judged by its text too (CLI options come as Paths)
        return False
    repo = split_repo_ref(str(ref))[0]
    return bool(_REPO_ID.match(repo)) and not Path(repo.split("/")[0]).is_dir()


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def locate(ref: str | Path, *, revision: str | None = None, cache_dir: str | Path | None = None,
           token: str | None = None) -> Path:
    """The local folder for ``ref``: an existing path as is; a Hub repo id (``org/name``, optionally
    ``org/name@revision``) as its snapshot in the huggingface_hub cache (downloaded when online; with
    ``HF_HUB_OFFLINE=1`` only the cache is read). Anything else comes back as ``Path(ref)`` for the caller's
    own "no artifact here" error. Hub failures are one-line :class:`ArtifactError` messages."""
    if not is_repo_id(ref):
        return Path(ref)
    repo, rev_in_ref = split_repo_ref(str(ref))
    if revision is not None and rev_in_ref is not None and revision != rev_in_ref:
        raise ArtifactError(f"two revisions given for {repo}: '{rev_in_ref}' and '{revision}'")
    revision = revision or rev_in_ref
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import snapshot_download

    offline = hub_offline()
    rev_txt = f" revision '{revision}'" if revision else ""
    try:
        return Path(snapshot_download(repo, revision=revision, cache_dir=str(cache_dir) if cache_dir else None,
                                      token=token, local_files_only=offline, library_name="geosteer"))
    except hf_errors.RevisionNotFoundError:
        raise ArtifactError(f"revision '{revision}' does not exist in the Hub repo {repo}") from None
    except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError):
        raise ArtifactError(f"no local folder '{ref}', and the Hub repo {repo} does not exist or is not "
                            "accessible with this token") from None
    except (hf_errors.LocalEntryNotFoundError, hf_errors.OfflineModeIsEnabled, FileNotFoundError):
        if offline:
            raise ArtifactError(f"no local folder '{ref}', and Hub repo {repo}{rev_txt} is not in the local Hub "
                                "cache (HF_HUB_OFFLINE=1): download it once online or pass a folder") from None
        raise ArtifactError(f"no local folder '{ref}', and the Hub repo {repo}{rev_txt} could not be "
                            "downloaded (no network?)") from None
    except Exception as e:  # noqa: BLE001 - network errors come in many types
        raise ArtifactError(f"could not fetch {repo}{rev_txt} from the Hub ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''})") from None


def resolve(path: str | Path | None = None, *, repo_id: str | None = None, revision: str | None = None,
            token: str | None = None) -> Path:
    """The local folder of an artifact: ``path`` itself (or a Hub id, see :func:`locate`), or a snapshot of
    the hub repo ``repo_id``."""
    if (path is None) == (repo_id is None):
        raise ArtifactError("give exactly one of a local path or repo_id=")
    if path is not None and not is_repo_id(path):
        p = Path(path)
        recover_folder(p)
        if not p.is_dir():
            raise ArtifactError(f"no artifact folder at {p}")
        return p
    return locate(repo_id if repo_id is not None else path, revision=revision, token=token)


def push(folder: str | Path, repo_id: str, *, private: bool = True, token: str | None = None,
         commit_message: str | None = None, revision: str | None = None) -> str:
    """Upload an artifact folder (config, tensors, model card) to the Hub repo ``repo_id``; return its URL.

    The folder must be a geosteer artifact whose README.md parses as a Hub model card."""
    folder = Path(folder)
    if not (folder / CONFIG_NAME).is_file():
        raise ArtifactError(f"{folder} is not a geosteer artifact (missing {CONFIG_NAME})")
    if not _REPO_ID.match(repo_id):
        raise ArtifactError(f"'{repo_id}' is not a Hub repo id (expected org/name)")
    from huggingface_hub import HfApi, ModelCard

    if (folder / CARD_NAME).is_file():
        try:
            ModelCard.load(folder / CARD_NAME)
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{folder / CARD_NAME} is not a valid model card ({e})") from None
    if hub_offline():
        raise ArtifactError(f"cannot push {folder} to {repo_id}: the Hugging Face Hub is in offline mode "
                            "(HF_HUB_OFFLINE=1); unset it to upload")
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), revision=revision,
                          commit_message=commit_message or f"Upload geosteer artifact {folder.name}")
    except Exception as e:  # noqa: BLE001 - network, auth and Hub errors come in many types
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ArtifactError(f"could not push {folder} to the Hub repo {repo_id} ({type(e).__name__}: "
                            f"{first[:200]}); check the network and your token (huggingface-cli login)") from None
    return str(url)


push_to_hub = push  # the older name


def convert_reference_checkpoint(path: str | Path) -> Path:
    """Import the attention-manifold reference release's checkpoint into a geosteer surfaces artifact.

    Not implemented on purpose: the reference release does not document its checkpoint layout (tensor
    names, grid and range conventions, knot placement), and a guessed mapping would load without error
    and silently compute something else. When the layout is documented, implement the mapping here,
    write the result with ``geosteer.manifold.save`` and test it against outputs published with it.
    """
    raise NotImplementedError(
        f"cannot convert {path}: the attention-manifold reference release's checkpoint format is not "
        "documented, so geosteer does not guess it; train surfaces with geosteer instead "
        "(geosteer.manifold) or implement geosteer.artifacts.convert_reference_checkpoint once the "
        "format is published")
