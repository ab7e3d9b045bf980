"""JAX's persistent compilation cache: on by default, in the folder DP_COMPARE_COMPILE_CACHE names, off when
asked; a second comparison in a new process compiles nothing; a bad folder never fails a run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# A comparison in a fresh process, counting JAX's cache events and the backend compiles it really ran.
PROBE = """
import json, sys, warnings
import jax.monitoring
counts = {}
def count(name, *args, **kwargs):
    counts[name] = counts.get(name, 0) + 1
jax.monitoring.register_event_listener(count)
jax.monitoring.register_event_duration_secs_listener(count)
from comparisons import compare
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    report = compare("mlp", batch_size=int(sys.argv[1]), devices=2, strategies=["explicit", "pmap"], steps=1,
                     torch_devices="cpu")
    import jax
print(json.dumps({"ok": report.ok, "hits": counts.get("/jax/compilation_cache/cache_hits", 0),
                  "misses": counts.get("/jax/compilation_cache/cache_misses", 0),
                  "folder": jax.config.jax_compilation_cache_dir,
                  "warnings": [str(w.message) for w in caught if "dp-compare" in str(w.message)]}))
"""


def comparison(tmp_path: Path, setting: str | None, batch: int = 5) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "DP_COMPARE_COMPILE_CACHE")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    if setting is not None:
        env["DP_COMPARE_COMPILE_CACHE"] = setting
    done = subprocess.run([sys.executable, "-c", PROBE, str(batch)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("batch", [5, 8])
def test_a_second_comparison_in_a_new_process_reads_every_program_from_the_cache(tmp_path, batch):
    folder = tmp_path / "cache"
    first = comparison(tmp_path, str(folder), batch)
    assert first["ok"] and first["misses"] > 0 and first["folder"] == str(folder)
    assert any(folder.iterdir())
    second = comparison(tmp_path, str(folder), batch)
    assert second["ok"] and second["misses"] == 0 and second["hits"] >= first["misses"]


def test_the_default_folder_is_per_user_and_off_writes_none(tmp_path):
    default = comparison(tmp_path, None)
    assert default["folder"] == str(tmp_path / "xdg" / "dp-compare" / "jax") and default["misses"] > 0
    off = comparison(tmp_path / "xdg", "off")
    assert off["folder"] in (None, "") and off["hits"] == off["misses"] == 0


def test_an_unusable_folder_is_warned_about_once_and_the_run_goes_on(tmp_path):
    (tmp_path / "a_file").write_text("")
    result = comparison(tmp_path, str(tmp_path / "a_file" / "cache"))
    assert result["ok"] and result["folder"] in (None, "")
    assert len(result["warnings"]) == 1 and "is not usable" in result["warnings"][0]


def test_unreadable_entries_are_warned_about_once_and_compiled_afresh(tmp_path):
    folder = tmp_path / "cache"
    comparison(tmp_path, str(folder))
    for entry in folder.iterdir():
        if entry.is_file():
            entry.write_bytes(b"not a compiled program")
    result = comparison(tmp_path, str(folder))
    assert result["ok"] and result["misses"] > 0
    assert len(result["warnings"]) == 1 and "unreadable entries" in result["warnings"][0]


def test_a_load_from_the_cache_counts_as_a_compile_as_compiles_documents(tmp_path):
    """dp_jax's compile counter (CompiledStep.compiles) reads one event, which JAX sends for a load too."""
    probe = ("import sys, jax, jax.numpy as jnp\n"
             "jax.config.update('jax_compilation_cache_dir', sys.argv[1])\n"
             "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
             "jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)\n"
             "from dp_jax._jax_compat import count_backend_compiles\n"
             "with count_backend_compiles() as c:\n"
             "    jax.jit(lambda x: jnp.sin(x) * float(sys.argv[2]))(jnp.ones(7)).block_until_ready()\n"
             "print(c.count)\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"PYTHONPATH": str(ROOT)}
    scale = str(len(str(tmp_path)))  # a program no other test compiled
    counts = [subprocess.run([sys.executable, "-c", probe, str(tmp_path / "c"), scale], env=env, capture_output=True,
                             text=True, timeout=120, check=True).stdout.strip() for _ in range(2)]
    assert counts[0] == counts[1] and int(counts[0]) >= 1
