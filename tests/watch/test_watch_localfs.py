"""The store's filesystem: an SQLite store on a network filesystem is refused, a local one accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from typer.testing import CliRunner

from zerodoctor.cli import app
from zerodoctor.watch import localfs
from zerodoctor.watch.localfs import filesystem_type, network_store_error


def mounts(tmp_path: Path, *rows: tuple[str, str]) -> Path:
    table = tmp_path / "mounts"
    table.write_text("".join(f"dev{i} {point} {fstype} rw,relatime 0 0\n" for i, (point, fstype) in enumerate(rows)))
    return table


@pytest.mark.parametrize("fstype", ["nfs4", "lustre", "gpfs", "fuse.sshfs", "ceph"])
def test_sqlite_store_on_a_network_filesystem_is_refused(tmp_path, fstype):
    shared = tmp_path / "shared runs"
    table = mounts(tmp_path, ("/", "ext4"), (str(shared).replace(" ", "\\040"), fstype))
    error = network_store_error(f"sqlite:///{shared}/exp/zerodoctor.db", table)
    assert error is not None and f"({fstype})" in error and "--db" in error and "\n" not in error


def test_local_store_below_a_network_mount_point_name_is_accepted(tmp_path):
    table = mounts(tmp_path, ("/", "ext4"), (str(tmp_path / "nfs"), "nfs"), (str(tmp_path / "nfs/local"), "xfs"))
    assert filesystem_type(tmp_path / "nfs" / "local" / "z.db", table) == "xfs"
    assert filesystem_type(tmp_path / "nfsother" / "z.db", table) == "ext4"  # a prefix of the name is not a parent
    assert network_store_error(f"sqlite:///{tmp_path}/nfs/local/z.db", table) is None
    assert network_store_error("postgresql://host/zd", table) is None


def test_watch_exits_2_with_one_line_when_its_default_store_is_on_nfs(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setattr(localfs, "MOUNTS", mounts(tmp_path, ("/", "ext4"), (str(runs), "nfs4")))
    result = CliRunner().invoke(app, ["watch", "--once", str(runs)])
    assert result.exit_code == 2
    assert "network filesystem (nfs4)" in result.stderr and "--db" in result.stderr
    assert not (runs / "zerodoctor.db").exists()
