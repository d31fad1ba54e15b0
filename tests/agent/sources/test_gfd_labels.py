"""GFD's features.d labels file: the sharing labels kept, bounds, re-read on change only."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gpuextender.agent.sources.gfd_labels import MAX_FILE_BYTES, MAX_VALUE_CHARS, GfdLabelsFile, parse_labels

# What GFD writes (one `key=value` per line, in map order), trimmed.
GFD_FILE = """\
nvidia.com/cuda.driver-version.full=550.127.05
nvidia.com/gpu.count=8
nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED
nvidia.com/gpu.replicas=4
nvidia.com/gpu.sharing-strategy=time-slicing
nvidia.com/gfd.timestamp=1724632719
nvidia.com/mig.strategy=none
"""
KEPT = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
}


def replace(path: Path, text: str | bytes) -> None:
    """As GFD writes: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text.encode() if isinstance(text, str) else text)
    os.replace(tmp, path)


def test_keeps_only_the_sharing_labels(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    path.write_text(GFD_FILE)
    assert GfdLabelsFile(str(path)).current() == KEPT


def test_a_missing_file_is_no_labels_and_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    labels = GfdLabelsFile(str(tmp_path / "features.d" / "gfd"))
    assert labels.current() == {} and labels.current() == {}
    assert caplog.records == []


def test_comments_blank_and_bad_lines_are_skipped() -> None:
    text = (
        "# +expiry-time=2030-01-01T00:00:00Z\n\n  nvidia.com/gpu.replicas = 2 \nno-equals-sign\n=value\n"
        "nvidia.com/gpu.count=1\nnvidia.com/gpu.count=2\r\n"
    )
    labels, bad = parse_labels(text)
    assert labels == {"nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.count": "2"}  # the last repeat wins
    assert bad == 2


def test_values_at_the_label_length_bound_are_kept_and_longer_ones_ignored() -> None:
    labels, bad = parse_labels(f"nvidia.com/gpu.product={'p' * MAX_VALUE_CHARS}\nnvidia.com/gpu.count={'1' * 64}\n")
    assert labels == {"nvidia.com/gpu.product": "p" * MAX_VALUE_CHARS} and bad == 1


def test_read_again_only_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    replace(path, GFD_FILE)
    labels = GfdLabelsFile(str(path))
    for _ in range(5):
        assert labels.current() == KEPT
    assert labels.reads == 1
    replace(path, GFD_FILE.replace("replicas=4", "replicas=8"))
    assert labels.current()["nvidia.com/gpu.replicas"] == "8" and labels.reads == 2
    os.unlink(path)
    assert labels.current() == {}  # GFD went away
    replace(path, GFD_FILE)
    assert labels.current() == KEPT and labels.reads == 3


def test_a_file_at_the_size_bound_is_read_and_one_byte_more_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpu_agent.gfd_labels")
    assert MAX_FILE_BYTES == 64 * 1024
    line = "nvidia.com/gpu.replicas=4\n"
    path = tmp_path / "gfd"
    replace(path, line + "#" * (MAX_FILE_BYTES - len(line) - 1) + "\n")
    assert path.stat().st_size == MAX_FILE_BYTES
    labels = GfdLabelsFile(str(path))
    assert labels.current() == {"nvidia.com/gpu.replicas": "4"}
    replace(path, line + "#" * (MAX_FILE_BYTES - len(line)) + "\n")
    assert labels.current() == {} and labels.current() == {}
    replace(path, line)
    assert labels.current() == {"nvidia.com/gpu.replicas": "4"}
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages == [
        (
            "WARNING",
            f"GFD labels file {path}: {MAX_FILE_BYTES + 1} bytes, more than the {MAX_FILE_BYTES} read; "
            "sharing labels unknown",
        ),
        ("INFO", f"GFD labels file {path} readable again"),
    ]


def test_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    assert GfdLabelsFile(str(tmp_path / "dir")).current() == {}
    os.mkfifo(tmp_path / "fifo")  # would block an open() for reading without O_NONBLOCK
    assert GfdLabelsFile(str(tmp_path / "fifo")).current() == {}


def test_undecodable_bytes_do_not_break_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    replace(path, b"nvidia.com/gpu.count=\xff\xfe\nnvidia.com/gpu.replicas=2\n")
    labels = GfdLabelsFile(str(path)).current()
    assert labels == {"nvidia.com/gpu.count": "\ufffd\ufffd", "nvidia.com/gpu.replicas": "2"}


def test_current_returns_a_copy(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    path.write_text(GFD_FILE)
    labels = GfdLabelsFile(str(path))
    labels.current().clear()
    assert labels.current() == KEPT
