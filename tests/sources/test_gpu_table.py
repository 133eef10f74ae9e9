"""nvidia-smi's GPU rows, real pastes in every way a console shows them, name the run's GPU (sources/gpu_table.py),
and with it the peak a model FLOPs utilisation is judged against (signals/throughput.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sources import test_message_families as families
from tests.sources.message_families import Message
from tests.sources.test_perf_families import events_of

_HEAD_OLD = ("| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
             "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |")
# Each table as pasted (its header and first GPU row), the name the row gives, the GPU kind it is.
TABLES = {
    # https://github.com/deepspeedai/DeepSpeedExamples/issues/475 (driver 530.30.02: the wide name column)
    "dse-475": (("| GPU  Name                  Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
                 "|   0  NVIDIA A100 80GB PCIe           On | 00000000:00:08.0 Off |                    0 |\n"
                 "| N/A   38C    P0               43W / 300W|      0MiB / 81920MiB |      0%      Default |"),
                "NVIDIA A100 80GB PCIe"),
    # https://github.com/keyu-tian/SparK/issues/8 (driver 450.191.01)
    "spark-8": ((_HEAD_OLD + "\n|   0  A100-SXM-80GB       On   | 00000000:10:00.0 Off |                    0 |\n"
                 "| N/A   61C    P0   175W / 400W |  33717MiB / 81252MiB |     84%      Default |"), "A100-SXM-80GB"),
    # https://github.com/deepspeedai/DeepSpeedExamples/issues/310 (driver 470.161.03: a long name cut to '...')
    "dse-310": ((_HEAD_OLD + "\n|   0  NVIDIA A100 80G...  Off  | 00000000:4F:00.0 Off |                    0 |\n"
                 "| N/A   35C    P0    71W / 300W |   1015MiB / 80994MiB |    100%      Default |"),
                "NVIDIA A100 80G..."),
}


def _message(table: str) -> Message:
    return Message("nvidia_smi", "", "nvidia-smi", "a real paste", (TABLES[table][0],), variant=table)


def _cases():
    for table in TABLES:
        for wrapping in families.WRAPPINGS:
            if wrapping == "rich" or not families._applies(_message(table), wrapping):
                continue
            yield pytest.param(table, wrapping, id=f"{table}-{wrapping}")


@pytest.mark.parametrize(("table", "wrapping"), list(_cases()))
def test_the_gpu_row_names_the_device(tmp_path: Path, table: str, wrapping: str) -> None:
    block = families.WRAPPINGS[wrapping](_message(table))
    path = tmp_path / "console.log"
    path.write_text("\n".join(block) + "\n", encoding="utf-8")
    named = [e["data"]["device_name"] for e in events_of(path) if e.get("what") == "gpu"]
    assert named == [TABLES[table][1]]
