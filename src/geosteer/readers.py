"""Bounded readers for files a user hands geosteer: regular files only, size and nesting caps, strict UTF-8,
one :class:`ReadRefused` line on any problem. User patterns are shell wildcards (:func:`match_pattern`),
never regular expressions.
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from geosteer.errors import GeosteerError

__all__ = ["MAX_CSV_FIELD", "MAX_DEPTH", "MAX_FILE_BYTES", "ReadRefused", "check_regular", "file_kind", "match_pattern",
           "read_bytes", "read_csv_rows", "read_json", "read_text", "parse_json", "safe_regex", "search_lines",
           "sha256_file"]

MAX_FILE_BYTES = 64 << 20  # a results, prompt or pair file larger than this is not one
MAX_DEPTH = 64  # JSON nesting (a tidy results file is 3-4 levels deep)
MAX_CSV_FIELD = 1 << 20  # bytes in one CSV cell
MAX_PATTERN = 200  # characters of a wildcard pattern


class ReadRefused(GeosteerError):
    """A file that is not a regular file, too large, not UTF-8, too deep or malformed: one line."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its ``st_mode`` ("a folder", "a FIFO (named pipe)"...)."""
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "not a regular file")


def _open_regular(path: Path, what: str, limit: int) -> int:
    """A read-only descriptor of the regular file ``path`` of at most ``limit`` bytes (opened without blocking
    on a FIFO or a device); anything else refused in one line."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ReadRefused(f"{what} {path}: no such file") from None
    except OSError as e:
        raise ReadRefused(f"{what} {path}: cannot open it ({e.strerror or type(e).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReadRefused(f"{what} {path} is {file_kind(st.st_mode)}; give a regular file")
        if st.st_size > limit:
            raise ReadRefused(f"{what} {path} is {st.st_size} bytes, over the {limit >> 20} MiB a {what} may have")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> Path:
    """Refuse, without reading it, a ``path`` that is not a regular file of at most ``limit`` bytes (for a file
    another library reads, e.g. parquet); ``Path(path)``."""
    path = Path(path)
    os.close(_open_regular(path, what, limit))
    return path


def _chunks(path: Path, what: str, limit: int) -> Iterator[bytes]:
    """The regular file ``path`` (at most ``limit`` bytes) in 1 MiB chunks; never blocks on a FIFO or a device."""
    fd = _open_regular(path, what, limit)
    total = 0
    try:
        while total <= limit:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except OSError as e:
                raise ReadRefused(f"{what} {path}: cannot read it ({e.strerror or type(e).__name__})") from None
            if not chunk:
                break
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise ReadRefused(f"{what} {path} is over the {limit >> 20} MiB a {what} may have")
            yield chunk
    finally:
        os.close(fd)


def read_bytes(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); never blocks on a FIFO or a device."""
    return b"".join(_chunks(Path(path), what, limit))


def sha256_file(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """The SHA-256 (hex) of the regular file ``path`` of at most ``limit`` bytes, read in 1 MiB chunks (the file is
    never held in memory whole); never blocks on a FIFO or a device."""
    digest = hashlib.sha256()
    for chunk in _chunks(Path(path), what, limit):
        digest.update(chunk)
    return digest.hexdigest()


def read_text(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """:func:`read_bytes` decoded as strict UTF-8 (a byte order mark is dropped)."""
    raw = read_bytes(path, what=what, limit=limit)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ReadRefused(f"{what} {path} is not UTF-8 text (byte {e.start})") from None


def _too_deep(doc: Any, limit: int) -> bool:
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return False


def _no_surrogates(doc: Any) -> str | None:
    """The first string (key or value) holding a lone surrogate (``"\\ud800"``: not text), else None."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return node
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def parse_json(text: str, source: str | Path, *, max_depth: int = MAX_DEPTH, what: str = "file") -> Any:
    """The JSON document in ``text``: at most ``max_depth`` deep, no lone surrogates; else one line."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ReadRefused(f"{what} {source} is nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as e:
        raise ReadRefused(f"{what} {source} is not valid JSON ({e.msg}, line {e.lineno})") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ReadRefused(f"{what} {source} is not valid JSON ({str(e).splitlines()[0][:80]})") from None
    if _too_deep(doc, max_depth):
        raise ReadRefused(f"{what} {source} is nested deeper than {max_depth} levels")
    bad = _no_surrogates(doc)
    if bad is not None:
        raise ReadRefused(f"{what} {source} holds a lone UTF-16 surrogate (in {ascii(bad)[:40]}), which is not "
                          "text; give valid Unicode")
    return doc


def read_json(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A bounded JSON file (:func:`read_text` + :func:`parse_json`)."""
    return parse_json(read_text(path, what=what, limit=limit), path, max_depth=max_depth, what=what)


def read_csv_rows(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES,
                  max_field: int = MAX_CSV_FIELD) -> list[dict[str, str | None]]:
    """The rows of a bounded CSV file as dicts of strings (``None`` for a missing trailing cell)."""
    text = read_text(path, what=what, limit=limit)
    old = csv.field_size_limit()
    try:
        csv.field_size_limit(max_field)
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = []
        for row in reader:
            if None in row:  # more cells than the header names
                raise ReadRefused(f"{what} {path}: line {reader.line_num} has more cells than the header")
            rows.append(row)
        return rows
    except csv.Error as e:
        raise ReadRefused(f"{what} {path} is not a readable CSV file (line {reader.line_num}: {e}; a cell may "
                          f"hold at most {max_field} bytes)") from None
    finally:
        csv.field_size_limit(old)


def match_pattern(pattern: str, text: str, *, what: str = "pattern") -> bool:
    """Whether ``text`` matches the shell-style wildcard ``pattern`` (``*``, ``?``, ``[abc]``; case-sensitive).
    fnmatch's translation has no nested repetition, so the match time is bounded by the lengths."""
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
        raise ReadRefused(f"{what} must be a wildcard pattern of at most {MAX_PATTERN} characters")
    return fnmatch.fnmatchcase(text, pattern)


MAX_REGEX = 200  # characters of a regular expression in an item file
MAX_REGEX_LINE = 1000  # characters of a text line a regular expression is searched in


def safe_regex(pattern: str) -> re.Pattern:
    """``pattern`` compiled so that no text can make it backtrack for ever: at most :data:`MAX_REGEX`
    characters, repeats of single characters or classes only, no backreference or lookaround, and every
    repeat possessive (it never gives back what it matched: ``([0-9.]+) ms``, not ``(.*) ms``). Search it line by line
    (:func:`search_lines`). Anything else raises ``ValueError`` with one line."""
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_REGEX:
        raise ValueError(f"a pattern must be 1 to {MAX_REGEX} characters")
    try:
        from re import _compiler, _constants, _parser
    except ImportError:  # pragma: no cover - Python < 3.11
        raise ValueError("patterns need Python 3.11 or newer") from None
    try:
        tree = _parser.parse(pattern, 0)
    except re.error as e:
        raise ValueError(f"pattern {pattern!r} does not compile: {e}") from None
    c = _constants
    refused = {c.GROUPREF: "a backreference", c.GROUPREF_EXISTS: "a conditional group", c.ASSERT: "a lookahead or "
               "lookbehind", c.ASSERT_NOT: "a negative lookahead or lookbehind"}

    single = {c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN, c.CATEGORY}

    def walk(sp) -> None:
        for i, (op, av) in enumerate(sp.data):
            if op in refused:
                raise ValueError(f"pattern {pattern!r} uses {refused[op]}, which item patterns may not")
            if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                body = av[2].data
                if len(body) != 1 or body[0][0] not in single:
                    raise ValueError(f"pattern {pattern!r} repeats a group (e.g. (a+)+ or (a|b)*), which can take "
                                     "for ever; repeat single characters or classes only ([0-9.]+, \\s*)")
                sp.data[i] = (c.POSSESSIVE_REPEAT, av)
            elif op == c.SUBPATTERN:
                walk(av[3])
            elif op == c.ATOMIC_GROUP:
                walk(av)
            elif op == c.BRANCH:
                for sub in av[1]:
                    walk(sub)

    walk(tree)
    return _compiler.compile(tree, 0)


def search_lines(rx: re.Pattern, text: str, *, source: str | Path = "text") -> list:
    """``rx.findall`` over each line of ``text``; a line over :data:`MAX_REGEX_LINE` characters is refused."""
    found: list = []
    for n, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_REGEX_LINE:
            raise ReadRefused(f"{source}: line {n} is longer than {MAX_REGEX_LINE} characters; a pattern is "
                              "searched in text lines of at most that length")
        found.extend(rx.findall(line))
    return found
