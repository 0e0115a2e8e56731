"""Where an artifact lives: a local folder or a Hub repo id ``org/name[@revision]`` (huggingface_hub cache,
``HF_HUB_OFFLINE=1`` honoured), and the upload of a folder (:func:`push`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from geosteer.errors import ArtifactError
from geosteer.formats import CONFIG_NAME
from geosteer.outputs import check_not_interrupted
from geosteer.shipped import expand

CARD_NAME = "README.md"
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


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
    return bool(REPO_ID.match(repo)) and not Path(repo.split("/")[0]).is_dir()


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def locate(ref: str | Path, *, revision: str | None = None, cache_dir: str | Path | None = None,
           token: str | None = None) -> Path:
    """The local folder for ``ref``: an existing path as is; a Hub repo id (``org/name``, optionally
    ``org/name@revision``) as its snapshot in the huggingface_hub cache (downloaded when online; with
    ``HF_HUB_OFFLINE=1`` only the cache is read). Anything else comes back as ``Path(ref)`` for the caller's
    own "no artifact here" error. Hub failures are one-line :class:`ArtifactError` messages. A shipped
    artifact's name (``smollm2-surfaces-all``, :mod:`geosteer.shipped`) is its folder inside the package,
    unless a local path of that name exists."""
    ref = expand(ref)
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
    path = expand(path) if path is not None else None  # a shipped artifact's name
    if path is not None and not is_repo_id(path):
        p = Path(path)
        check_not_interrupted(p)
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
    if not REPO_ID.match(repo_id):
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
