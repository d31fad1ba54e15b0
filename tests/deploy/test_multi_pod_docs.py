"""deploy/README.md, "Multi-pod jobs", as code: its config file example goes through gpu-extender's
own configuration, and every gpu-extender flag it names is one the parser takes."""

from __future__ import annotations

import re
from pathlib import Path

from gpuextender.extender.flags import build_config, build_parser
from tests.harness import ROOT

SECTION = (ROOT / "deploy" / "README.md").read_text().split("## Multi-pod jobs\n", 1)[1].split("\n## ", 1)[0]


def test_the_config_example_is_read_as_written(tmp_path: Path) -> None:
    (example,) = re.findall(r"```yaml\n(.*?)```", SECTION, re.S)
    path = tmp_path / "gpu-policy.yaml"
    path.write_text(example)
    api = build_config(["--config", str(path)]).api
    assert api.group_levels == ("nvidia.com/gpu.clique", "cloud.google.com/gce-topology-block")
    assert api.group_hold_s == 600.0


def test_every_group_flag_named_is_a_flag_of_gpu_extender() -> None:
    named = set(re.findall(r"`(--group-[a-z-]+)", SECTION))
    assert named == {
        "--group-topology-levels",
        "--group-topology-policy",
        "--group-hold",
        "--group-members-grace",
        "--group-holds-per-namespace",
    }
    known = {o for a in build_parser()._actions for o in a.option_strings}
    assert named <= known
