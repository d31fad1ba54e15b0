"""GPU Feature Discovery's sharing labels, read from the file GFD writes on the node.

GFD (NVIDIA/k8s-device-plugin, cmd/gpu-feature-discovery) writes its labels for
node-feature-discovery's `local` source as `key=value` lines, replacing the file atomically
(write + rename), by default at /etc/kubernetes/node-feature-discovery/features.d/gfd, every
--sleep-interval (60 s). With --use-node-feature-api it writes a NodeFeature object instead and
there is no file: then the labels are simply unknown here ({}), which is no error.

Only the labels that say how GPUs are shared are kept (allocation.py reads them); the file is
read again only when its mtime, size or inode change, and at most MAX_FILE_BYTES of it.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass

from gpuextender.agent.sources.allocation import LABEL_COUNT, LABEL_PRODUCT, LABEL_REPLICAS, LABEL_SHARING_STRATEGY

log = logging.getLogger("gpu_agent.gfd_labels")

DEFAULT_PATH = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
KEPT_LABELS = (LABEL_REPLICAS, LABEL_SHARING_STRATEGY, LABEL_PRODUCT, LABEL_COUNT)
# GFD's file holds ~40 short labels (~2 KiB); a bigger file is not GFD's.
MAX_FILE_BYTES = 64 * 1024
MAX_VALUE_CHARS = 63  # a Kubernetes label value; the extender refuses longer sharing labels


@dataclass(frozen=True, slots=True)
class _FileVersion:
    mtime_ns: int
    size: int
    inode: int


def parse_labels(text: str) -> tuple[dict[str, str], int]:
    """The kept labels of a features.d file, and how many lines were not `key=value`.
    Comments (`#`, also NFD's `# +expiry-time=` directives) and blank lines are skipped;
    the last of repeated keys wins, as in NFD."""
    labels: dict[str, str] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            bad += 1
            continue
        if key in KEPT_LABELS:
            if len(value) > MAX_VALUE_CHARS or not value.isprintable():
                bad += 1
                continue
            labels[key] = value
    return labels, bad


class GfdLabelsFile:
    """The sharing labels in GFD's features.d file; `current()` once per sample (one stat)."""

    def __init__(self, path: str = DEFAULT_PATH, *, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._version: _FileVersion | None = None
        self._labels: dict[str, str] = {}
        self._problem: str | None = None  # the last problem logged, "" when the file read fine
        self.reads = 0  # how many times the file was read (tests check the mtime gate)

    def current(self) -> dict[str, str]:
        """The kept labels (a fresh dict each call); {} when the file is missing or unreadable.
        Never raises."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self._set(None, {}, "")  # no GFD, or GFD using the NodeFeature API: no error
        except OSError as exc:
            return self._set(None, {}, f"cannot stat: {exc.strerror or exc}")
        version = _FileVersion(st.st_mtime_ns, st.st_size, st.st_ino)
        if version == self._version:
            return dict(self._labels)
        if not stat.S_ISREG(st.st_mode):
            return self._set(version, {}, "not a regular file")
        if st.st_size > self._max_bytes:
            return self._set(version, {}, f"{st.st_size} bytes, more than the {self._max_bytes} read")
        try:
            # O_NONBLOCK: a FIFO swapped in after the stat must not hang the sampler.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            try:
                data = os.read(fd, self._max_bytes + 1)
            finally:
                os.close(fd)
        except OSError as exc:
            return self._set(None, {}, f"cannot read: {exc.strerror or exc}")
        self.reads += 1
        if len(data) > self._max_bytes:  # grew between stat and read
            return self._set(None, {}, f"more than the {self._max_bytes} bytes read")
        labels, bad = parse_labels(data.decode("utf-8", errors="replace"))
        if bad:
            log.debug("GFD labels file %s: %d line(s) ignored", self.path, bad)
        return self._set(version, labels, "")

    def _set(self, version: _FileVersion | None, labels: dict[str, str], problem: str) -> dict[str, str]:
        self._version = version
        self._labels = labels
        if problem != self._problem:
            if problem:
                log.warning("GFD labels file %s: %s; sharing labels unknown", self.path, problem)
            elif self._problem:
                log.info("GFD labels file %s readable again", self.path)
            self._problem = problem
        return dict(labels)
