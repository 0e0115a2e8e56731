"""Former spellings of verbs: each is refused in one line naming its current spelling (exit 2), so a user's
old script says what to type instead of "No such command". Hidden: they are in no ``--help``."""

from __future__ import annotations

# former spelling -> current spelling
RENAMED = {
    "recipe keys": "recipe show --keys", "vectors export-gguf": "show --export", "vectors show": "show --export",
    "record-qk": "measure explore --record-qk", "directional strength": "study directional strength",
    "dynamics critical": "study dynamics critical", "directional ppl": "ppl --set",
    "dynamics ablate": "study dynamics ablate", "dynamics gains": "study dynamics gains",
    "manifold show": "show", "manifold train": "learn surfaces", "manifold wall-learn": "learn walls",
    "manifold steer-learn": "learn steering-surfaces", "study directional steer-learn": "learn scales",
    "vectors train": "learn vectors", "dynamics gates": "learn gates", "decompose": "measure decompose",
    "dynamics diagnose": "measure diagnose", "manifold explore": "measure explore",
    "bench steering": "bench decide",  # retired: the one steering benchmark is bench decide
}


def renamed_line(args: list[str]) -> str | None:
    """The one-line refusal for ``geosteer ARGS`` when ARGS start with a former spelling, else None."""
    words = [a for a in args[:3] if not a.startswith("-")]
    for n in (3, 2, 1):
        old = " ".join(words[:n])
        if len(words) >= n and old in RENAMED:
            return (f"'geosteer {old}' is now 'geosteer {RENAMED[old]}' (see geosteer {RENAMED[old].split()[0]} "
                    "--help)")
    return None
