"""``fix --in-place`` changes a config's content and nothing else: mode, owner and symlinks stay."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_cli
from tests.config.conftest import ISSUE_CONFIG


def _check_fix_in_place(config: Path) -> None:
    proc = run_cli("check", str(config), "--world-size", "4", "--no-deepspeed", "--fix", "--in-place",
                   "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout


def test_fix_in_place_keeps_mode_and_owner(tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(ISSUE_CONFIG))
    config.chmod(0o604)  # no umask gives a new file this mode: a replaced file would not keep it
    owner = (65534, 65534) if os.geteuid() == 0 else (os.geteuid(), os.getegid())  # root can give it to nobody
    if os.geteuid() == 0:
        os.chown(config, *owner)
    _check_fix_in_place(config)
    assert json.loads(config.read_text()) != ISSUE_CONFIG  # patched
    st = config.stat()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o604, *owner)


def test_fix_in_place_writes_through_a_symlink_to_its_target(tmp_path):
    real = tmp_path / "configs" / "ds_config.json"
    real.parent.mkdir()
    real.write_text(json.dumps(ISSUE_CONFIG))
    real.chmod(0o640)
    link = tmp_path / "ds.json"
    link.symlink_to(real)
    _check_fix_in_place(link)
    assert link.is_symlink() and link.resolve() == real  # the link stays a link
    assert json.loads(real.read_text())["optimizer"]["params"]["lr"] == 1e-4  # the real file got the patch
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["ds_config.json"]  # no temporary left behind
