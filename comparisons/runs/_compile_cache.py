"""JAX's persistent compilation cache for comparisons: compile a program once per machine, not once per run.

A user iterating on a port runs the same comparison again and again, each time in a new process; every
run used to compile every program from scratch. On the first JAX run of a process this turns on
JAX's own persistent cache (`jax_compilation_cache_dir`, every program however fast it compiles) in
a per-user folder:

    $DP_COMPARE_COMPILE_CACHE     a folder, or "off"
    else $XDG_CACHE_HOME/dp-compare/jax   (~/.cache/dp-compare/jax)

A folder that cannot be created or written is warned about once and the run goes on without a
cache; so is an unreadable entry (JAX then compiles that program afresh). A cache directory the
user set in JAX's own config is left as it is. Entries are keyed by JAX on the program, the JAX
version and the backend, so one folder serves every version.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

ENV = "DP_COMPARE_COMPILE_CACHE"
_JAX_READ_ERROR = "Error reading persistent compilation cache entry"
_state: dict[str, Path | None] = {}


def default_folder() -> Path:
    """$XDG_CACHE_HOME/dp-compare/jax, or ~/.cache/dp-compare/jax."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dp-compare" / "jax"


def use_compile_cache() -> Path | None:
    """Turn the persistent cache on (once per process) where $DP_COMPARE_COMPILE_CACHE says; the folder or None.

    Costs one write of a probe file the first time; then nothing but JAX's own reads and writes.
    """
    if "folder" in _state:
        return _state["folder"]
    import jax

    setting = os.environ.get(ENV, "").strip()
    own = jax.config.jax_compilation_cache_dir
    if own:  # the user's own cache: theirs to manage
        folder: Path | None = Path(own)
    elif setting.lower() == "off":
        folder = None
    else:
        folder = _writable(Path(setting).expanduser() if setting else default_folder())
        if folder is not None:
            jax.config.update("jax_compilation_cache_dir", str(folder))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
            _warn_once_on_unreadable_entries(folder)
    _state["folder"] = folder
    return folder


def _writable(folder: Path) -> Path | None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        warnings.warn(f"dp-compare: the compilation cache folder {folder} is not usable ({error}); compiling "
                      f"without it (set {ENV} to another folder, or to 'off')", RuntimeWarning, stacklevel=3)
        return None
    return folder


def _warn_once_on_unreadable_entries(folder: Path) -> None:
    """JAX warns once per unreadable entry, every run; say it once, with the way out."""
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith(_JAX_READ_ERROR):
            if _state.get("warned"):
                return
            _state["warned"] = folder
            message = (f"dp-compare: the compilation cache in {folder} has unreadable entries ({message}); those "
                       f"programs compile afresh. Delete the folder to rebuild it, or set {ENV}=off")
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning
