"""The recorded ``make bench`` run that chapters 7, 9, 10, 13 and 14 quote, and what it measured.

A timing is only evidence about the code that was timed. Each section of the
recorded run (``data/bench-2core.json``) therefore carries, besides its
numbers, a description of its measurement: the commit, the CPU, the thread
counts, the library versions and BLAS kernel, and a SHA-256 hash of every
source file whose code it timed (the modules it names and every package module
they import). :func:`recorded_run` hands a chapter one section and warns with
:class:`StaleRecordWarning` when one of those files has changed since: the
numbers then describe older code, and ``make bench`` must be run again. The
test suite fails on it too: ``tests/test_recorded.py`` compares every
section's recorded hashes with the files as they are now.
"""

from __future__ import annotations

import ast
import hashlib
import json
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["recorded_run", "stale_sources", "source_hashes", "package_sources", "StaleRecordWarning", "RECORD_FILE"]

#: The recorded run, inside the package's data directory.
RECORD_FILE = "data/bench-2core.json"


class StaleRecordWarning(UserWarning):
    """A recorded section's measured source files have changed since it was recorded."""


def _package_root() -> Path:
    return Path(str(resources.files("selfattention")))


def package_sources(modules: list[str] | tuple[str, ...]) -> list[str]:
    """The package files behind ``modules``: each one and every package module it imports, transitively.

    Parameters
    ----------
    modules : sequence of str
        Module names inside the package, e.g. ``["efficient"]`` or
        ``["selfattention.decoding"]``.

    Returns
    -------
    list of str
        Paths relative to the package's parent, e.g. ``"selfattention/efficient.py"``, sorted.

    Raises
    ------
    ValueError
        If ``modules`` is not a sequence of names of the package's modules.
    """
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        raise ValueError(f"modules must be a list or tuple of module names; got {type(modules).__name__}")
    root = _package_root()
    pending, seen = [], set()
    for name in modules:
        if not isinstance(name, str):
            raise ValueError(f"modules must hold module names (str); got {type(name).__name__}")
        parts = name.removeprefix("selfattention.").split(".") if name != "selfattention" else ["__init__"]
        pending.append(tuple(parts))
    files = []
    while pending:
        parts = pending.pop()
        path = _module_file(root, parts)
        if path is None:
            raise ValueError(f"no module selfattention.{'.'.join(parts)} in the package at {root}")
        if path in seen:
            continue
        seen.add(path)
        files.append(path)
        package = parts if path.name == "__init__.py" and parts != ("__init__",) else parts[:-1]
        pending.extend(_relative_imports(path, package, root))
    return sorted(str(path.relative_to(root.parent)).replace("\\", "/") for path in files)


def _module_file(root: Path, parts: tuple[str, ...]) -> Path | None:
    if parts == ("__init__",):
        return root / "__init__.py"
    candidate = root.joinpath(*parts)
    if (candidate / "__init__.py").is_file():
        return candidate / "__init__.py"
    if candidate.with_suffix(".py").is_file():
        return candidate.with_suffix(".py")
    return None


def _relative_imports(path: Path, package: tuple[str, ...], root: Path) -> list[tuple[str, ...]]:
    """The package modules that ``path`` imports relatively at module level (``from .x import y``).

    Imports inside functions are left out: they run only when that function is
    called, and a timed call that needs one names its module itself.
    """
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = package[: len(package) - (node.level - 1)]
        target = base + tuple(node.module.split(".")) if node.module else base
        if target and _module_file(root, target) is not None:
            found.append(target)
        found.extend(target + (alias.name,) for alias in node.names if _module_file(root, target + (alias.name,)))
    return found


def _digest(path: Path) -> str:
    """SHA-256 of a text file with its line endings made ``\\n`` (a Windows checkout hashes the same)."""
    return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def source_hashes(files: list[str] | tuple[str, ...], root: Path | None = None) -> dict[str, str]:
    """SHA-256 of each file, keyed by its path relative to ``root`` (default: the package's parent).

    Raises
    ------
    ValueError
        If a file does not exist.
    """
    base = _package_root().parent if root is None else Path(root)
    hashes = {}
    for name in files:
        path = base / name
        if not path.is_file():
            raise ValueError(f"cannot hash {name}: no such file under {base}")
        hashes[name] = _digest(path)
    return hashes


def _load() -> dict[str, Any]:
    return json.loads(resources.files("selfattention").joinpath(RECORD_FILE).read_text(encoding="utf-8"))


def _section(section: Any) -> dict[str, Any]:
    record = _load()["sections"]
    if not isinstance(section, str) or section not in record:
        raise ValueError(f"section must be one of {sorted(record)}; got {section!r}")
    return record[section]


def recorded_run(section: str, *, check_sources: bool = True) -> dict[str, Any]:
    """One section of the recorded ``make bench`` run, with what it measured under ``"measured"``.

    Parameters
    ----------
    section : str
        ``"attention"``, ``"causal"``, ``"decoding"``, ``"backward"``, ``"minilm"`` or
        ``"llm"`` (once recorded).
    check_sources : bool, default True
        Compare the hashes of the package files the section timed with the
        files installed now, and warn with :class:`StaleRecordWarning` for each
        one that changed (files outside the package, such as the benchmark's
        own script, are checked by the test suite in a clone).

    Raises
    ------
    ValueError
        If ``section`` is not one of the recorded sections.
    """
    result = _section(section)
    if check_sources is not True and check_sources is not False:
        raise ValueError(f"check_sources must be True or False; got {check_sources!r}")
    if check_sources:
        changed = stale_sources(section)
        if changed:
            warnings.warn(
                f"the recorded '{section}' run timed older versions of {', '.join(changed)}: its numbers do not "
                f"describe the code installed now; run `make bench` (or its --sections {section}) again",
                StaleRecordWarning,
                stacklevel=2,
            )
    return result


def stale_sources(section: str, clone: Path | None = None) -> list[str]:
    """The files a recorded section timed that differ now, or are missing.

    Package files (``selfattention/...``) are looked up in the installed
    package; the others (the benchmark's own modules, ``benchmarks/...``) only
    when ``clone``, the root of a clone of the repository, is given.

    Raises
    ------
    ValueError
        If ``section`` is not one of the recorded sections, or ``clone`` is
        given but is not a path to a directory with ``benchmarks/`` in it.
    """
    sources = _section(section)["measured"]["sources"]
    if clone is not None:
        if not isinstance(clone, (str, Path)):
            raise ValueError(
                f"clone must be the path of a clone of the repository, or None; got {type(clone).__name__}"
            )
        if not (Path(clone) / "benchmarks").is_dir():
            raise ValueError(f"clone must be the root of a clone of the repository (with benchmarks/); got {clone!s}")
    changed = []
    for name, digest in sources.items():
        if name.startswith("selfattention/"):
            path = _package_root().parent / name
        elif clone is not None:
            path = Path(clone) / name
        else:
            continue
        if not path.is_file() or _digest(path) != digest:
            changed.append(name)
    return sorted(changed)
