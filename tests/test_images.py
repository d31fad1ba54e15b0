"""Dockerfile.agent, Dockerfile.extender and .dockerignore, checked without a Docker engine.

The fast tests read the Dockerfiles (tests/dockerfile_rules.py) and hold them to the image rules:
two stages, pinned bases, a numeric non-root user, only build artefacts in the final stage, no
compilers, exec-form entrypoints equal to the console scripts, OCI labels, EXPOSE equal to the
programs' default ports, the runtime environment. Each rule is also shown to catch a bad file.

The slow tests replay the build stage's own RUN steps on this machine, reading them from the
Dockerfile: the build context is what .dockerignore admits, the container's `/` maps to a
temporary directory, `python` is this interpreter. Then they run the console scripts found
through the final stage's PATH, with the final stage's environment, from outside the repository.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuextender import __version__
from gpuextender.common.netaddr import parse_host_port
from tests import dockerfile_rules as rules
from tests.dockerfile_rules import Dockerfile, DockerfileError, Stage

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gpuextender.__version__"}

# What the python:*-slim base image puts in the environment before our ENV instructions.
PYTHON_IMAGE_ENV = {"PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def _agent_parser() -> argparse.ArgumentParser:
    from gpuextender.agent.settings import build_parser

    return build_parser()


def _extender_parser() -> argparse.ArgumentParser:
    from gpuextender.extender.flags import build_parser

    return build_parser()


@dataclass(frozen=True)
class Image:
    key: str
    dockerfile: str
    script: str
    parser: Callable[[], argparse.ArgumentParser]  # the program's own argument parser
    listen_options: tuple[str, ...]  # its HOST:PORT options whose default ports the image exposes

    def load(self) -> Dockerfile:
        return rules.load(ROOT / self.dockerfile)

    def default_ports(self) -> set[int]:
        parser = self.parser()
        return {parse_host_port(parser.get_default(dest)).port for dest in self.listen_options}


IMAGES = [
    Image("agent", "Dockerfile.agent", "gpu-agent", _agent_parser, ("metrics_addr",)),
    Image("extender", "Dockerfile.extender", "gpu-extender", _extender_parser, ("http_addr", "grpc_addr")),
]
each_image = pytest.mark.parametrize("image", IMAGES, ids=[i.key for i in IMAGES])


# --- the Dockerfiles' rules -----------------------------------------------------------------------


@each_image
def test_two_stages_build_then_runtime_on_the_same_base(image: Image) -> None:
    df = image.load()
    assert len(df.stages) >= 2
    build, final = df.stages[0], df.final
    assert build.name == "build"
    # The venv is copied between stages: its interpreter link must exist at the same path.
    assert final.base == build.base
    base = df.base_of(final)  # the default; CI builds on its own base with --build-arg BASE=...
    assert re.fullmatch(r"python:3\.(1[1-9])\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", base), base


@each_image
def test_every_base_image_is_pinned(image: Image) -> None:
    assert rules.pin_problems(image.load()) == []
    assert rules.syntax_problems((ROOT / image.dockerfile).read_text()) == []


@each_image
def test_final_stage_runs_as_numeric_non_root(image: Image) -> None:
    final = image.load().final
    assert rules.user_problems(final) == []
    assert final.user() == "65532:65532"


@each_image
def test_final_stage_copies_only_build_artefacts(image: Image) -> None:
    df = image.load()
    assert rules.copy_problems(df) == []
    copies = df.final.copies()
    assert copies and all(c.from_stage == "build" for c in copies)
    # The source tree goes into the build stage only, into its WORKDIR.
    build = df.stages[0]
    context_copies = [c for c in build.copies() if c.from_stage is None]
    assert [(c.sources, c.dest) for c in context_copies] in ([(["."], ".")], [(["."], build.workdir())])


@each_image
def test_no_compiler_or_build_tool_is_installed(image: Image) -> None:
    df = image.load()
    for stage in df.stages:
        assert rules.build_tool_problems(stage) == [], stage.ref
    # And the final stage runs nothing at all: it is metadata plus the copied venv.
    assert df.final.run_commands() == []


@each_image
def test_entrypoint_is_the_console_script_in_exec_form(image: Image) -> None:
    final = image.load().final
    assert image.script in PYPROJECT["project"]["scripts"]
    assert rules.entrypoint_problems(final, [image.script]) == []
    assert final.all("CMD") == []  # arguments come from the pod spec


@each_image
def test_oci_labels(image: Image) -> None:
    final = image.load().final
    expected = {
        "org.opencontainers.image.title": image.script,
        "org.opencontainers.image.version": __version__,  # the one version (pyproject reads it too)
        "org.opencontainers.image.licenses": PYPROJECT["project"]["license"],  # an SPDX expression
    }
    assert rules.label_problems(final, expected) == []
    assert final.labels()["org.opencontainers.image.source"].startswith("https://")


@each_image
def test_exposed_ports_are_the_programs_defaults(image: Image) -> None:
    assert image.load().final.exposed_ports() == image.default_ports()


@each_image
def test_runtime_environment(image: Image) -> None:
    df = image.load()
    env = df.final.env(PYTHON_IMAGE_ENV)
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # nothing written beside the code (read-only root)
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    assert "PYTHONPATH" not in env
    # The ENTRYPOINT is found through PATH: its first entry is the bin/ of the copied venv.
    (venv_copy,) = df.final.copies()
    first = env["PATH"].split(":")[0]
    assert first == venv_copy.dest.rstrip("/") + "/bin"
    assert env["PATH"].endswith(PYTHON_IMAGE_ENV["PATH"])  # the base image's PATH is kept


def test_agent_image_gets_nvml_from_the_nvidia_runtime() -> None:
    agent = IMAGES[0]
    env = agent.load().final.env(PYTHON_IMAGE_ENV)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "runtimeClassName: nvidia" in (ROOT / agent.dockerfile).read_text()


def test_extender_image_asks_for_no_gpus() -> None:
    env = IMAGES[1].load().final.env(PYTHON_IMAGE_ENV)
    assert not [k for k in env if k.startswith("NVIDIA_")]


def test_both_images_share_one_build_stage() -> None:
    agent, extender = (i.load().stages[0] for i in IMAGES)
    assert [(i.keyword, i.value) for i in agent.instructions] == [(i.keyword, i.value) for i in extender.instructions]
    assert agent.base == extender.base


def _pip_calls(stage: Stage) -> Iterator[list[str]]:
    for command in stage.run_commands():
        for argv in rules.and_chain(command):
            if "pip" in argv:
                yield argv


@each_image
def test_build_stage_pins_pip_and_caches_nothing(image: Image) -> None:
    df = image.load()
    build = df.stages[0]
    calls = list(_pip_calls(build))
    pins = [argv for argv in calls if _is_pip_pin(argv)]
    assert len(pins) == 1 and re.fullmatch(r"pip==\d+\.\d+(\.\d+)?", pins[0][-1]), calls
    assert calls.index(pins[0]) == 0, "pip is pinned before anything else is built or installed"
    for argv in calls:
        assert "--no-cache-dir" in argv, argv
    wheels = [argv for argv in calls if "wheel" in argv]
    assert len(wheels) == 1 and "--no-deps" in wheels[0]
    # Dependencies only as wheels: nothing is compiled, even in the build stage.
    installs = [argv for argv in calls if "install" in argv and argv not in pins]
    assert installs and all("--only-binary=:all:" in argv for argv in installs), installs


def test_dockerignore_admits_exactly_what_the_wheel_needs() -> None:
    patterns = rules.parse_dockerignore((ROOT / ".dockerignore").read_text())
    context = set(rules.context_files(ROOT, patterns))
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"]}
    for directory in OUR_PACKAGES:
        for path in (ROOT / directory).rglob("*"):
            rel = path.relative_to(ROOT).as_posix()
            if path.is_file() and "__pycache__" not in rel and path.suffix != ".pyc":
                needed.add(rel)
    assert context == needed
    assert not any(name.startswith(("tests/", ".git/", ".venv/")) for name in context)


# --- the rules catch what they are for ------------------------------------------------------------

GOOD = """\
FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN python -m pip wheel --no-deps -w /wheels .
FROM python:3.11.14-slim-bookworm
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
ENTRYPOINT ["gpu-agent"]
"""


def _variant(old: str, new: str) -> Dockerfile:
    assert old in GOOD
    return rules.parse_dockerfile(GOOD.replace(old, new))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("python:3.11.14-slim-bookworm AS", "python:3.11-slim-bookworm AS"),
        ("python:3.11.14-slim-bookworm AS", "python:latest AS"),
        ("python:3.11.14-slim-bookworm AS", "python AS"),
        ("FROM python:3.11.14-slim-bookworm\n", "FROM python:3-slim\n"),
        ("FROM python:3.11.14-slim-bookworm\n", "FROM python@sha256:1234\n"),
        ("FROM python:3.11.14-slim-bookworm\n", "FROM $BASE\n"),
    ],
)
def test_pin_rule_rejects_floating_bases(old: str, new: str) -> None:
    assert rules.pin_problems(rules.parse_dockerfile(GOOD)) == []
    assert rules.pin_problems(_variant(old, new)) != []


def test_syntax_directive_is_pinned_too() -> None:
    assert rules.syntax_problems("# syntax=docker/dockerfile:1\n" + GOOD) != []
    assert rules.syntax_problems("# syntax=docker/dockerfile:1.9.0\n" + GOOD) == []
    assert rules.syntax_problems(GOOD + "# syntax=docker/dockerfile:1\n") == []  # a comment by then


def test_pin_rule_accepts_digests_registry_ports_and_stage_names() -> None:
    digest = "sha256:" + "a" * 64
    text = f"FROM registry:5000/python@{digest} AS build\nFROM build AS again\nFROM python:3.12.7-slim\n"
    assert rules.pin_problems(rules.parse_dockerfile(text)) == []


@pytest.mark.parametrize(
    "user", ["", "USER app\n", "USER 65532\n", "USER 0:65532\n", "USER 65532:0\n", "USER nonroot:nonroot\n"]
)
def test_user_rule_rejects_root_names_and_a_missing_gid(user: str) -> None:
    assert rules.user_problems(rules.parse_dockerfile(GOOD).final) == []
    assert rules.user_problems(_variant("USER 65532:65532\n", user).final) != []


@pytest.mark.parametrize(
    "copy",
    [
        "COPY . .\n",
        "COPY . /app\n",
        "COPY agent /opt/agent\n",
        "ADD https://example.com/x.whl /tmp/\n",
        "COPY --from=build /src /src\n",
        "COPY --from=build /src/agent /opt/agent\n",
        "COPY --from=build / /\n",
        "COPY --from=python:3.11.14-slim /usr /usr\n",
    ],
)
def test_copy_rule_rejects_the_source_tree_in_the_final_stage(copy: str) -> None:
    assert rules.copy_problems(rules.parse_dockerfile(GOOD)) == []
    assert rules.copy_problems(_variant("COPY --from=build /opt/venv /opt/venv\n", copy)) != []


@pytest.mark.parametrize(
    "run",
    [
        "RUN apt-get update && apt-get install -y --no-install-recommends build-essential\n",
        "RUN apt-get install -y gcc-12 && rm -rf /var/lib/apt/lists/*\n",
        "RUN apk add --no-cache musl-dev\n",
        "RUN apt-get install -y \\\n    libffi-dev\n",
    ],
)
def test_build_tool_rule_rejects_compilers(run: str) -> None:
    assert rules.build_tool_problems(_variant("USER", run + "USER").final) != []
    assert rules.build_tool_problems(_variant("USER", "RUN apt-get install -y ca-certificates\nUSER").final) == []


@pytest.mark.parametrize(
    "entrypoint",
    [
        "ENTRYPOINT gpu-agent\n",
        'ENTRYPOINT ["python", "-m", "gpuextender.agent"]\n',
        'CMD ["gpu-agent"]\n',
        'ENTRYPOINT ["gpu-extender"]\n',
    ],
)
def test_entrypoint_rule_wants_the_exec_form_script(entrypoint: str) -> None:
    assert rules.entrypoint_problems(rules.parse_dockerfile(GOOD).final, ["gpu-agent"]) == []
    bad = _variant('ENTRYPOINT ["gpu-agent"]\n', entrypoint).final
    assert rules.entrypoint_problems(bad, ["gpu-agent"]) != []


def test_label_rule_wants_every_oci_label_and_the_expected_values() -> None:
    labels = " ".join(f'{k}="x"' for k in rules.OCI_LABELS)
    good = _variant("USER", f"LABEL {labels}\nUSER").final
    assert rules.label_problems(good, {}) == []
    assert rules.label_problems(good, {"org.opencontainers.image.version": "0.1.0"}) != []
    missing = " ".join(f'{k}="x"' for k in rules.OCI_LABELS[:-1])
    assert rules.label_problems(_variant("USER", f"LABEL {missing}\nUSER").final, {}) != []
    empty = labels.replace('version="x"', 'version="${VERSION}"')
    assert rules.label_problems(_variant("USER", f"LABEL {empty}\nUSER").final, {}) != []


def test_parser_reads_continuations_comments_args_and_exec_forms() -> None:
    text = """\
# syntax=docker/dockerfile:1
ARG GLOBAL=1
FROM --platform=$BUILDPLATFORM python:3.11.14-slim AS Builder
RUN a \\
# a comment inside the continuation is dropped
    && b \\

    && c
FROM python:3.11.14-slim
ARG VERSION=0.2.0
ENV A=1 B="two words" \\
    PATH=/opt/venv/bin:$PATH
ENV C=$A-${B} D=${MISSING:-fallback}
ENV LEGACY the whole rest
LABEL v="${VERSION}" a="$A"
EXPOSE 8888/tcp 9090
ENTRYPOINT [ "gpu-extender", "--log-level", "debug" ]
CMD gpu-extender --help
"""
    df = rules.parse_dockerfile(text)
    assert [i.value for i in df.global_args] == ["GLOBAL=1"]
    assert [(s.name, s.base) for s in df.stages] == [("builder", "python:3.11.14-slim"), (None, "python:3.11.14-slim")]
    assert df.stages[0].instructions[0].flags_and_rest()[0] == {}  # RUN has no flags here
    assert df.stages[0].run_commands() == ["a     && b     && c"]
    assert rules.and_chain(df.stages[0].run_commands()[0]) == [["a"], ["b"], ["c"]]
    env = df.final.env({"PATH": "/usr/bin"})
    assert env == {
        "PATH": "/opt/venv/bin:/usr/bin",
        "A": "1",
        "B": "two words",
        "C": "1-two words",
        "D": "fallback",
        "LEGACY": "the whole rest",
    }
    assert df.final.labels() == {"v": "0.2.0", "a": "1"}
    assert df.final.exposed_ports() == {8888, 9090}
    assert df.final.all("ENTRYPOINT")[0].exec_form() == ["gpu-extender", "--log-level", "debug"]
    assert df.final.all("CMD")[0].exec_form() is None
    with pytest.raises(DockerfileError):
        rules.and_chain("a; b")
    with pytest.raises(DockerfileError):
        rules.parse_dockerfile("FROM python:3.11.14-slim\nRUN a \\\n")


def test_dockerignore_matching_follows_docker() -> None:
    patterns = rules.parse_dockerignore("*\n!gpuextender\n!proto/keep\n**/__pycache__\n**/*.py[co]\n!keep/**/x.txt\n")
    assert not rules.is_ignored("gpuextender/agent/cli.py", patterns)
    assert not rules.is_ignored("proto/keep/v1/gpu_state.proto", patterns)
    assert not rules.is_ignored("keep/a/b/x.txt", patterns)
    for ignored in (
        "tests/test_images.py",
        "proto/generate.py",
        "gpuextender/__pycache__/main.cpython-311.pyc",
        "gpuextender/sub/__pycache__",
        "gpuextender/agent/x.pyc",
        ".venv/bin/python",
        "Dockerfile.agent",
    ):
        assert rules.is_ignored(ignored, patterns), ignored


# --- replaying the build stage --------------------------------------------------------------------


def _is_pip_pin(argv: list[str]) -> bool:
    """`python -m pip install [--options] pip==X`: the build stage's upgrade of its own pip."""
    if argv[:4] != ["python", "-m", "pip", "install"]:
        return False
    targets = [a for a in argv[4:] if not a.startswith("-")]
    return len(targets) == 1 and targets[0].startswith("pip==")


class Replay:
    """The build stage's steps run here, the container's `/` mapped to `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def host(self, container_path: str) -> Path:
        assert container_path.startswith("/"), container_path
        return self.root / os.path.normpath(container_path).lstrip("/")

    def map_word(self, word: str) -> list[str]:
        flag, eq, value = word.partition("=") if word.startswith("--") else ("", "", word)
        if not value.startswith("/"):
            return [word]
        mapped = str(self.host(value))
        if any(c in mapped for c in "*?["):
            matches = sorted(glob.glob(mapped))
            assert matches, f"{word}: nothing matches {mapped}"
            return [flag + eq + m for m in matches]
        return [flag + eq + mapped]

    def map_env(self, env: dict[str, str]) -> dict[str, str]:
        return {
            k: ":".join(str(self.host(p)) if p.startswith("/") else p for p in v.split(":")) for k, v in env.items()
        }

    def run_build_stage(self, stage: Stage, context: list[str]) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
        }
        workdir = "/"
        for ins in stage.instructions:
            if ins.keyword == "ENV":
                env.update(rules.key_values(ins.value))
            elif ins.keyword == "WORKDIR":
                workdir = ins.value.strip()
                self.host(workdir).mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                (copy,) = [c for c in stage.copies() if c.line == ins.line]
                assert copy.from_stage is None and copy.sources == ["."], "only `COPY . DEST` is replayed"
                dest = self.host(copy.dest if copy.dest.startswith("/") else f"{workdir}/{copy.dest}")
                for name in context:
                    (dest / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / name, dest / name)
            elif ins.keyword == "RUN":
                for argv in rules.and_chain(stage.run_commands()[stage.all("RUN").index(ins)]):
                    if _is_pip_pin(argv):
                        continue  # would upgrade this test's own pip; its pin is checked above
                    assert argv[0] == "python", f"no replay for {argv[0]!r}: teach tests/test_images.py"
                    # --no-cache-dir keeps the image small; here pip's cache keeps the test fast.
                    words = [sys.executable] + [m for w in argv[1:] if w != "--no-cache-dir" for m in self.map_word(w)]
                    subprocess.run(
                        words,
                        cwd=self.host(workdir),
                        env=env,
                        check=True,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                    )
            else:
                pytest.fail(f"line {ins.line}: no replay for {ins.keyword} in the build stage")


@dataclass
class Built:
    replay: Replay
    venv: Path  # host path of the directory the final stage copies
    wheels: list[Path]
    context: list[str]
    precompiled: list[Path]  # .pyc files of our packages right after the install

    def site_packages(self) -> Path:
        (site,) = self.venv.glob("lib/python3.*/site-packages")
        return site

    def image_env(self, image: Image) -> dict[str, str]:
        return self.replay.map_env(image.load().final.env(PYTHON_IMAGE_ENV))


OUR_PACKAGES = ["gpuextender"]  # the one top-level import package (pyproject: packages.find)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    df = IMAGES[0].load()  # test_both_images_share_one_build_stage: the extender's is the same
    patterns = rules.parse_dockerignore((ROOT / ".dockerignore").read_text())
    context = rules.context_files(ROOT, patterns)
    replay = Replay(tmp_path_factory.mktemp("image") / "root")
    replay.host("/tmp").mkdir(parents=True)
    try:
        replay.run_build_stage(df.stages[0], context)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"{exc.cmd} failed:\n{exc.stdout.decode(errors='replace')}")
    (copy,) = df.final.copies()
    (source,) = copy.sources
    assert copy.dest == source, "the venv must keep its path: its scripts' shebangs name it"
    venv = replay.host(source)
    (site,) = venv.glob("lib/python3.*/site-packages")
    precompiled = sorted(p for pkg in OUR_PACKAGES for p in (site / pkg).rglob("*.pyc"))
    wheels = sorted(replay.root.rglob("*.whl"))
    return Built(replay, venv, wheels, context, precompiled)


@pytest.mark.slow
def test_wheel_is_complete_and_holds_no_tests(built: Built) -> None:
    (wheel,) = built.wheels
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {name for name in built.context if name.startswith("gpuextender/") and name.endswith(".py")}
    assert expected <= names, sorted(expected - names)
    assert {
        "gpuextender/v1/gpu_state_pb2.py",
        "gpuextender/v1/gpu_state_pb2_grpc.py",
        "gpuextender/v1/gpu_state.proto",
        "gpuextender/v1/gpu_state_pb2.pyi",
        "gpuextender/py.typed",
        "gpuextender/agent/cli.py",
        "gpuextender/agent/__main__.py",
        "gpuextender/extender/cli.py",
        "gpuextender/extender/__main__.py",
        "gpuextender/extender/inventory/__init__.py",
        "gpuextender/extender/model/ome/__init__.py",
        "gpuextender/common/backoff.py",
        "gpuextender/podresources/v1/api_pb2.py",
        "gpuextender/podresources/v1/api_pb2_grpc.py",
        "gpuextender/podresources/v1/api.proto",
        "gpuextender/podresources/v1/api_pb2.pyi",
    } <= names
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == set(OUR_PACKAGES)  # no tests/, proto/, bench/, examples/, and no generic names
    # What pip records as the distribution's top-level import names: exactly one, ours.
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["gpuextender"]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for script, target in PYPROJECT["project"]["scripts"].items():
        assert f"{script} = {target}" in text
    # The readme reached the build (setuptools leaves the description out silently when it does not).
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    readme = (ROOT / PYPROJECT["project"]["readme"]).read_text().splitlines()[0]
    assert readme in zipfile.ZipFile(wheel).read(metadata).decode()


@pytest.mark.slow
def test_venv_holds_the_installed_project_and_no_installer(built: Built, tmp_path: Path) -> None:
    config = (built.venv / "pyvenv.cfg").read_text()
    assert re.search(r"^include-system-site-packages\s*=\s*false$", config, re.MULTILINE)
    site = built.site_packages()
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"kube_gpu_extender", "grpcio", "protobuf", "nvidia_ml_py", "orjson", "aiohttp"} <= installed
    assert not installed & {"pip", "setuptools", "wheel"}, "no installer or build backend at runtime"
    assert not (site / "tests").exists()
    # pip compiled our bytecode at install time, so the read-only image never has to.
    assert {p.parent.parent.relative_to(site).parts[0] for p in built.precompiled} == set(OUR_PACKAGES)
    # Imports resolve to site-packages, not to a source tree (run from outside the repository).
    probe = (
        "import gpuextender.agent.cli as a, gpuextender.extender.cli as e, gpuextender.v1.gpu_state_pb2 as m; "
        "print(a.__file__); print(e.__file__); print(m.__file__)"
    )
    out = subprocess.run(
        [str(built.venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        env=built.image_env(IMAGES[0]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for path in out.splitlines():
        assert Path(path).is_relative_to(site), path


def _run_entrypoint(
    built: Built, image: Image, env: dict[str, str], cwd: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    argv = image.load().final.all("ENTRYPOINT")[-1].exec_form()
    assert argv is not None
    program = shutil.which(argv[0], path=env["PATH"])
    assert program is not None and Path(program).is_relative_to(built.venv / "bin"), program
    return subprocess.run(
        [program, *argv[1:], *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.slow
@each_image
def test_console_script_runs_from_the_image_venv(built: Built, image: Image, tmp_path: Path) -> None:
    result = _run_entrypoint(built, image, built.image_env(image), tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {image.script}")
    flags = {s for action in image.parser()._actions for s in action.option_strings if s.startswith("--")}
    missing = [f for f in flags if f not in result.stdout]
    assert not missing, missing


def _snapshot(*dirs: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size if p.is_file() else -1, p.stat().st_mtime_ns)
        for d in dirs
        for p in [d, *d.rglob("*")]
    }


@pytest.mark.slow
@each_image
def test_runtime_writes_nothing_beside_the_code(built: Built, image: Image, tmp_path: Path) -> None:
    """Read-only root filesystem, approximated: with the image's environment the program writes
    nothing into the venv or HOME/TMPDIR, even where no bytecode was precompiled."""
    site = built.site_packages()
    ours = [site / pkg for pkg in OUR_PACKAGES]

    def drop_bytecode() -> None:
        for cache in [c for pkg in ours for c in pkg.rglob("__pycache__")]:
            shutil.rmtree(cache)

    env = built.image_env(image)
    scratch = Path(env["TMPDIR"])
    drop_bytecode()
    before = _snapshot(built.venv, scratch)
    assert _run_entrypoint(built, image, env, tmp_path, "--help").returncode == 0
    assert _snapshot(built.venv, scratch) == before

    # The same run without the image's PYTHONDONTWRITEBYTECODE does write: the check above is live.
    env.pop("PYTHONDONTWRITEBYTECODE")
    assert _run_entrypoint(built, image, env, tmp_path, "--help").returncode == 0
    assert [c for pkg in ours for c in pkg.rglob("__pycache__")]
