"""The checked rulebook kept between commands (rulebook/cache.py) is never stale, never needed, never trusted.

An edited rule, a rule added to a plugin's or a ``--rules`` directory, or another signal catalogue is loaded
and checked again; a rule file broken after a clean load still says its error with file and line and exits 2;
a corrupt or foreign entry, or a cache directory that cannot be written, costs only the time. The OOM line is the
first one of ``samples/fragmentation-oom/console.log`` (a real run's output).
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, fill, run_cli
from zerodoctor import signals
from zerodoctor.rulebook import cache, loader

OOM = next(line for line in (ROOT / "samples" / "fragmentation-oom" / "console.log").read_text().splitlines(
    keepends=True) if "CUDA out of memory" in line)
DOC = "doc: |\n  ## What it does\n  x\n\n  ## Why is this bad?\n  y\n"


def _probe(said: str, when: str = "memory.oom_count > 0") -> str:
    return (f"code: ZD991\nname: cache-probe\ncategory: memory\nseverity: warning\nwhen: {when}\n"
            f"message: '{said} {{memory.oom_count}} OOM'\n{DOC}")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("ZERODOCTOR_CACHE_DIR", str(directory))
    return directory


def test_an_edited_rule_is_read_again_and_a_broken_one_still_says_its_line(tmp_path: Path, cache_dir: Path) -> None:
    log, rules = tmp_path / "oom.log", tmp_path / "extra"
    log.write_text(OOM)
    rules.mkdir()
    probe = rules / "ZD991-cache-probe.yaml"

    def diagnose() -> tuple[int, str]:
        proc = run_cli("diagnose", "--fail-on", "never", "--rules", str(rules), str(log))
        return proc.returncode, proc.stdout + proc.stderr

    probe.write_text(_probe("first wording:"))
    for _ in range(2):  # a cold cache, then a warm one
        code, out = diagnose()
        assert code == 0 and "first wording: 1 OOM" in out, out
    assert list(cache_dir.glob("rules-*.pickle")), "a clean load is kept"

    probe.write_text(_probe("second wording:"))  # same size class, same directory: only the bytes differ
    code, out = diagnose()
    assert code == 0 and "second wording: 1 OOM" in out and "first wording" not in out, out

    probe.write_text(_probe("second wording:", when="memory.oom_cont > 0"))
    code, out = diagnose()
    assert code == 2, out
    assert f"{probe}:5: RL202: unknown signal 'memory.oom_cont'" in out

    probe.write_text(_probe("second wording:"))
    code, out = diagnose()
    assert code == 0 and "second wording: 1 OOM" in out, out


def test_a_clean_load_is_read_back_without_loading_a_file(tmp_path: Path, cache_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    first = loader.rules_from()
    monkeypatch.setattr(loader, "_load_checked", _refuse)
    again = loader.rules_from()
    assert [(r.code, r.path, r.spec, sorted(r.texts())) for r in again] == [
        (r.code, r.path, r.spec, sorted(r.texts())) for r in first]
    catalog = signals.catalog()
    assert all(s is catalog[name] for r in again for name, s in r.signals.items())  # the live catalogue's entries


def test_a_rule_added_to_a_directory_or_another_catalogue_is_another_key(tmp_path: Path, cache_dir: Path) -> None:
    plugin = tmp_path / "plugin-rules"
    plugin.mkdir()
    (plugin / "ZD991-cache-probe.yaml").write_text(_probe("probe:"))
    dirs = [loader.builtin_rules_dir(), plugin]
    catalog = signals.catalog()

    def key(dirs: list[Path], catalog: dict = catalog) -> str | None:
        files = loader._files(dirs)
        assert files is not None
        return cache.key(files, catalog, loader.MAX_RULE_BYTES)

    before = key(dirs)
    assert [r.code for r in loader.load_rules(dirs, catalog)][-1] == "ZD991"
    (plugin / "sub").mkdir()
    (plugin / "sub" / "ZD992-cache-probe-two.yaml").write_text(_probe("two:").replace("ZD991", "ZD992").replace(
        "cache-probe", "cache-probe-two"))
    assert key(dirs) != before
    assert [r.code for r in loader.load_rules(dirs, catalog)][-2:] == ["ZD991", "ZD992"]
    moved = tmp_path / "elsewhere"
    shutil.copytree(plugin, moved)
    assert key([loader.builtin_rules_dir(), moved]) != key(dirs)  # a rule's path is part of what it says
    fewer = {name: s for name, s in catalog.items() if name != "memory.oom_count"}
    assert key(dirs, fewer) != key(dirs)
    with pytest.raises(loader.RuleLoadError, match="unknown signal 'memory.oom_count'"):
        loader.load_rules(dirs, fewer)


def test_a_corrupt_or_foreign_entry_is_a_miss_and_is_written_again(cache_dir: Path) -> None:
    expected = [r.code for r in loader.rules_from()]
    (entry,) = cache_dir.glob("rules-*.pickle")
    entry.write_bytes(b"\x80\x05not a pickle")
    assert [r.code for r in loader.rules_from()] == expected
    assert cache.read(entry.name[len("rules-"):-len(".pickle")], signals.catalog()) is not None  # written again

    marker = cache_dir / "ran"
    for hostile in (pickle.dumps(_Hostile(str(marker))),
                    # os.system reached through a rulebook module's own import, by a dotted name (protocol 4)
                    b"\x80\x04czerodoctor.rulebook.cache\nos.system\n(S'touch " + str(marker).encode() + b"'\ntR."):
        entry.write_bytes(hostile)
        assert [r.code for r in loader.rules_from()] == expected
        assert not marker.exists(), "an entry builds nothing but the rulebook's own classes"


def test_a_cache_directory_that_cannot_be_written_costs_only_the_time(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("ZERODOCTOR_CACHE_DIR", str(blocked / "zerodoctor"))  # its parent is a file: no mkdir
    assert len(loader.rules_from()) == len(loader.rules_from()) > 0
    assert blocked.read_text() == ""


def test_no_home_directory_costs_only_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZERODOCTOR_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", _homeless)
    assert len(loader.rules_from()) > 0


def test_a_full_disk_costs_only_the_time_and_leaves_no_half_entry(small_disk: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    directory = small_disk / "cache"
    directory.mkdir()
    fill(small_disk / "filler")
    monkeypatch.setenv("ZERODOCTOR_CACHE_DIR", str(directory))
    assert len(loader.rules_from()) == len(loader.rules_from()) > 0
    assert list(directory.iterdir()) == []  # neither an entry cut short nor its temporary file


def test_without_the_variable_the_cache_is_the_xdg_user_cache(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.delenv("ZERODOCTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "zerodoctor"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "zerodoctor"


def _homeless() -> Path:
    raise RuntimeError("Could not determine home directory.")  # pathlib's words where HOME and the passwd entry lack


def _refuse(*args: object) -> None:
    raise AssertionError("the rules were loaded again, where the cache held them")


class _Hostile:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))
