"""The frames of a traceback that are the application's own code.

When loading ``MODULE:APP`` raises, the command line shows where, in the application's
lines only: the standard library's, the installed packages' (SQLAlchemy, attrs, ...) and
kumiko-typed's own frames told a user about code they did not write.  A frame of the
target's own top-level package counts as the application's wherever that package is
installed (a service installed into the venv's site-packages)."""

from __future__ import annotations

import importlib.util
import os
import site
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

__all__ = ["user_frames"]

_OURS = Path(__file__).parent


def _library_folders() -> list[Path]:
    paths = sysconfig.get_paths()
    folders = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    folders += [*site.getsitepackages(), site.getusersitepackages()]
    found = {Path(f) for f in folders} | {Path(os.path.realpath(f)) for f in folders}
    return [*found, _OURS, Path(os.path.realpath(_OURS))]


def _package_folder(module_name: str) -> Path | None:
    """Where the target's top-level package (or module) lives, if it can be found without
    importing anything."""
    try:
        spec = importlib.util.find_spec(module_name.partition(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin and spec.has_location else None


def _within(filename: str, folder: Path) -> bool:
    return Path(filename).is_relative_to(folder) or Path(os.path.realpath(filename)).is_relative_to(folder)


def user_frames(tb: TracebackType | None, module_name: str) -> list[traceback.FrameSummary]:
    """The frames of ``tb`` in the application's files, outermost first."""
    library = _library_folders()
    own = _package_folder(module_name)
    return [
        frame
        for frame in traceback.extract_tb(tb)
        if not frame.filename.startswith("<")  # <frozen importlib._bootstrap>, <string>
        and ((own is not None and _within(frame.filename, own)) or not any(_within(frame.filename, f) for f in library))
    ]
