"""``geosteer studio``: serve the web studio for one model and one surface artifact."""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path

import typer

from geosteer.cli.common import CHAT_OPT, DEVICE_OPT, DTYPE_OPT, FORCE_OPT, MODEL_OPT, SYSTEM_OPT, THREADS_OPT, load
from geosteer.cli.recipe import RECIPE_OPT, SET_OPT, spec_from_options, surfaces_option


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> list[str] | None:
    """Host headers the app answers: loopback names (plus ``host``); None (any) when bound to all."""
    if host in ("0.0.0.0", "::"):
        return None
    names = ["127.0.0.1", "localhost", "[::1]"]
    if host in names or host == "::1":
        return names
    return names + [f"[{host.lower()}]" if ":" in host else host.lower()]  # IPv6 literals: bracketed, as in Host


def check_workspace(workspace: Path) -> None:
    """Refuse (one line, before the model loads) a workspace that is a file or lies under one, or a symlink
    that loops."""
    from geosteer.errors import GeosteerError
    from geosteer.studio.workspace import resolved_workspace

    resolved_workspace(workspace)
    for p in (workspace, *workspace.parents):
        if p.exists():
            if not p.is_dir():
                what = "is" if p == workspace else f"lies under {p}, which is"
                raise GeosteerError(f"--workspace {workspace} {what} a file, not a folder")
            return


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(\.{_LABEL})*\.?")


def listen_socket(host: str, port: int) -> socket.socket:
    """The bound socket the server will listen on, opened before the model loads: a host that is neither
    an IP address nor a host name, or an address that cannot be bound (port in use, no such interface),
    is one line. The server is handed this very socket, so nothing can take the port in between."""
    from geosteer.errors import GeosteerError

    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.fullmatch(host):
            raise GeosteerError(f"--host {host!r} is neither an IP address nor a host name") from None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise GeosteerError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise GeosteerError(f"cannot listen on {host}:{port}: {e.strerror or e} (choose another --port or "
                            "--host)") from None
    return sock


def apply_recipe_rest(model, bank, spec, force: bool = False) -> list:
    """What a recipe adds besides its surfaces: its surface ``edits`` made on ``bank`` and its
    ``surfaces_strength`` (coefficients × s), and every other method's interventions attached to ``model``
    for the session; returns their ``remove`` functions."""
    from geosteer.manifold.edit import Edit, apply_edits
    from geosteer.manifold.method import at_strength, edit_list

    edits = edit_list(spec.edits)
    if edits:
        apply_edits(bank, [Edit.from_dict(e) if isinstance(e, dict) else e for e in edits])
    at_strength(bank, spec.surfaces_strength)
    rest = spec.with_values(surfaces=None, edits=None, surfaces_strength=1.0)
    return [iv.attach(model) for iv in rest.build(model, force=force)]


def studio(
    model: str = MODEL_OPT,
    surfaces: Path | None = surfaces_option("default: fresh zero surfaces on every layer"),
    recipe: str | None = RECIPE_OPT,
    settings: list[str] | None = SET_OPT,
    port: int = typer.Option(8765, "--port", "-p"),
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind; anything but loopback "
                             "exposes the model to the network (a warning is printed)"),
    workspace: Path = typer.Option(Path("studio-workspace"), "--workspace", help="the only folder the "
                                   "studio reads artifacts from and saves them to"),
    results: list[Path] = typer.Option([], "--results", help="folders of study result files to show "
                                       "(read-only; default docs/results if it exists)"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="cap on tokens per generation"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    force: bool = FORCE_OPT,
    max_queue: int = typer.Option(32, "--max-queue", help="generations queued or running at most; "
                                  "more get 503 with Retry-After"),
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
) -> None:
    """Local web app to see and edit attention manifolds live (FastAPI + a static page).

    --recipe/--set/--surfaces as on every steering verb: the recipe's surfaces (and edits) are the ones
    edited, its other settings stay applied underneath for the whole session."""
    if not 1 <= port <= 65535:
        raise ValueError(f"--port must be in 1–65535 (got {port})")
    if not 1 <= max_new_tokens <= 512:
        raise ValueError(f"--max-new-tokens must be in 1–512 (got {max_new_tokens})")
    from geosteer.errors import GeosteerError
    from geosteer.eval.chat import check_chat_options, has_chat_template
    from geosteer.shipped import expand

    check_chat_options(chat, system)
    spec = spec_from_options(recipe, settings, surfaces, model=model,
                             force=force)  # a bad value: one line, before the load
    start = Path(expand(spec.surfaces)) if spec.surfaces is not None else None  # a shipped name: its folder
    if start is not None and not start.is_dir():
        raise FileNotFoundError(f"surface artifact folder not found: {start}")
    check_workspace(workspace)
    if not 1 <= max_queue <= 1000:
        raise ValueError(f"--max-queue must be in 1–1000 (got {max_queue})")
    missing = [r for r in results if not r.is_dir()]
    if missing:
        raise FileNotFoundError(f"--results folder not found: {missing[0]}")
    sock = listen_socket(host, port)
    if not is_loopback(host):
        typer.echo(f"warning: binding {host}: anyone who can reach this address can run and edit the "
                   "model and write into the workspace; there is no authentication", err=True)
    import uvicorn

    from geosteer.studio import bankio
    from geosteer.studio.server import create_app
    from geosteer.studio.session import Session

    try:
        m, tok = load(model, threads=threads, device=device, dtype=dtype)
        if chat and not has_chat_template(tok):
            raise GeosteerError("--chat needs a tokenizer with a chat template; this model's tokenizer has "
                                "none (leave out --chat to continue plain text)")
        bank = bankio.open_bank(m, start, force=force)
        apply_recipe_rest(m, bank, spec, force=force)
    except BaseException:
        sock.close()
        raise
    roots = list(results) or ([Path("docs/results")] if Path("docs/results").is_dir() else [])
    session = Session(m, tok, bank, workspace, model_name=model,
                      artifact_name=start.name if start else "zero surfaces",
                      max_new_tokens_cap=max_new_tokens, max_queue=max_queue, chat=chat, system=system)
    app_ = create_app(session, roots, allowed_hosts=allowed_hosts(host))
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"geosteer studio: http://{shown}:{port}/  (workspace {session.workspace})", err=True)
    server = uvicorn.Server(uvicorn.Config(app_, host=host, port=port, log_level="warning", access_log=False))
    server.run(sockets=[sock])


def register(app: typer.Typer) -> None:
    app.command("studio")(studio)
