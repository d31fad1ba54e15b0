"""Offline reading of Dockerfiles and .dockerignore, and the rules the images must follow.

There is no Docker engine on the development or CI machines, so tests/test_images.py checks the
Dockerfiles as text: this module parses them (line continuations, comments, multi-stage
`FROM ... AS ...`, exec-form JSON, ENV/LABEL key=value pairs with ARG/ENV substitution) and
implements the rules as functions that return a list of problems (empty: the rule holds), so that
each rule can also be shown to fail on a bad Dockerfile.

Only what the project's Dockerfiles use is supported; anything else raises DockerfileError
rather than being read wrongly (a different `# escape=` directive, heredocs).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path


class DockerfileError(ValueError):
    pass


# --- Dockerfile -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    value: str  # everything after the keyword, continuations joined
    line: int  # 1-based line of the keyword

    def flags_and_rest(self) -> tuple[dict[str, str], str]:
        """Leading `--name=value` (or bare `--name`) flags of FROM/RUN/COPY/ADD, and the rest."""
        flags: dict[str, str] = {}
        rest = self.value
        while True:
            m = re.match(r"--([A-Za-z][A-Za-z0-9-]*)(?:=(\S*))?\s*", rest)
            if m is None:
                return flags, rest
            flags[m.group(1)] = m.group(2) if m.group(2) is not None else ""
            rest = rest[m.end() :]

    def exec_form(self) -> list[str] | None:
        """The JSON array of RUN/CMD/ENTRYPOINT (exec form), or None for the shell form."""
        _, rest = self.flags_and_rest()
        if not rest.startswith("["):
            return None
        try:
            parsed = json.loads(rest)
        except json.JSONDecodeError:
            return None  # Docker too falls back to the shell form for invalid JSON
        if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
            return None
        return parsed


@dataclass
class Stage:
    index: int
    base: str  # the image reference (or earlier stage name) after FROM
    name: str | None  # lower-cased `AS` name
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def ref(self) -> str:
        """How later stages name this one in `COPY --from=` / `FROM`."""
        return self.name if self.name is not None else str(self.index)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def _walk(
        self, base_env: Mapping[str, str] | None
    ) -> tuple[list[tuple[Instruction, dict[str, str]]], dict[str, str]]:
        """Each instruction with the ARG/ENV variables in scope before it, and the final ENV.

        As in Docker, the values of one ENV instruction see the variables from before it, and
        ENV wins over an ARG of the same name; ARGs are not part of the container's environment.
        """
        args: dict[str, str] = {}
        env: dict[str, str] = dict(base_env or {})
        walked = []
        for ins in self.instructions:
            scope = {**args, **env}
            walked.append((ins, scope))
            if ins.keyword == "ARG":
                name, eq, default = ins.value.strip().partition("=")
                args[name.strip()] = substitute(_unquote(default), scope) if eq else ""
            elif ins.keyword == "ENV":
                for key, value in key_values(ins.value).items():
                    env[key] = substitute(value, scope)
        return walked, env

    def env(self, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The container environment at the end of the stage, over `base_env` (the base image's)."""
        return self._walk(base_env)[1]

    def labels(self) -> dict[str, str]:
        walked, _ = self._walk(None)
        out: dict[str, str] = {}
        for ins, scope in walked:
            if ins.keyword == "LABEL":
                for key, value in key_values(ins.value).items():
                    out[key] = substitute(value, scope)
        return out

    def exposed_ports(self) -> set[int]:
        ports: set[int] = set()
        for ins in self.all("EXPOSE"):
            for word in ins.value.split():
                number, _, proto = word.partition("/")
                if proto not in ("", "tcp"):
                    raise DockerfileError(f"line {ins.line}: only TCP ports are expected, got {word}")
                ports.add(int(number))
        return ports

    def user(self) -> str | None:
        users = self.all("USER")
        return users[-1].value.strip() if users else None

    def workdir(self) -> str | None:
        """The last WORKDIR (absolute paths only, which is all the project uses)."""
        dirs = self.all("WORKDIR")
        return dirs[-1].value.strip() if dirs else None

    def copies(self) -> list[Copy]:
        out = []
        for ins in self.instructions:
            if ins.keyword not in ("COPY", "ADD"):
                continue
            flags, rest = ins.flags_and_rest()
            words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            if len(words) < 2:
                raise DockerfileError(f"line {ins.line}: {ins.keyword} needs a source and a destination")
            out.append(Copy(ins.keyword, flags.get("from"), words[:-1], words[-1], ins.line))
        return out

    def run_commands(self) -> list[str]:
        """Each RUN as one shell command line (an exec-form RUN joined with spaces)."""
        out = []
        for ins in self.all("RUN"):
            argv = ins.exec_form()
            out.append(shlex.join(argv) if argv is not None else ins.flags_and_rest()[1])
        return out


@dataclass(frozen=True)
class Copy:
    keyword: str
    from_stage: str | None  # None: from the build context
    sources: list[str]
    dest: str
    line: int


@dataclass
class Dockerfile:
    stages: list[Stage]
    global_args: list[Instruction]  # ARGs before the first FROM

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def global_defaults(self) -> dict[str, str]:
        """The ARGs before the first FROM with their defaults: what `FROM ${NAME}` reads."""
        out: dict[str, str] = {}
        for ins in self.global_args:
            name, eq, default = ins.value.partition("=")
            out[name.strip()] = substitute(_unquote(default), out) if eq else ""
        return out

    def base_of(self, stage: Stage) -> str:
        """The stage's FROM with global ARG defaults filled in (`--build-arg` may override them)."""
        return substitute(stage.base, self.global_defaults())

    def stage(self, ref: str) -> Stage:
        for s in self.stages:
            if s.ref == ref.lower() or str(s.index) == ref:
                return s
        raise KeyError(ref)


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, instruction text): comments dropped, `\\` continuations joined.

    As in Docker, a comment line or an empty line inside a continued instruction is skipped, and
    the backslash and newline are removed without adding a space.
    """
    lines = text.splitlines()
    for number, raw in enumerate(lines[:20], 1):  # parser directives sit at the very top
        m = re.match(r"#\s*escape\s*=\s*(\S+)", raw.strip(), re.IGNORECASE)
        if m and m.group(1) != "\\":
            raise DockerfileError(f"line {number}: only the default escape character is supported")
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if pending and (stripped == "" or stripped.startswith("#")):
            continue
        if not pending and (stripped == "" or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if re.search(r"<<-?\s*[\"']?[A-Za-z_]", raw) and not pending:
            word = stripped.split(None, 1)[0].upper()
            if word in ("RUN", "COPY"):
                raise DockerfileError(f"line {number}: heredocs are not supported by this parser")
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        pending.append(raw)
        yield start, "".join(pending).strip()
        pending = []
    if pending:
        raise DockerfileError(f"line {start}: the file ends inside a continued instruction")


def parse_dockerfile(text: str) -> Dockerfile:
    stages: list[Stage] = []
    global_args: list[Instruction] = []
    for line, content in logical_lines(text):
        keyword, _, value = content.partition(" ")
        ins = Instruction(keyword.upper(), value.strip(), line)
        if ins.keyword == "FROM":
            _, rest = ins.flags_and_rest()  # --platform does not matter here
            words = rest.split()
            if len(words) == 1:
                base, name = words[0], None
            elif len(words) == 3 and words[1].upper() == "AS":
                base, name = words[0], words[2].lower()
            else:
                raise DockerfileError(f"line {line}: cannot read FROM {ins.value!r}")
            stages.append(Stage(len(stages), base, name, line))
        elif not stages:
            if ins.keyword != "ARG":
                raise DockerfileError(f"line {line}: {ins.keyword} before the first FROM")
            global_args.append(ins)
        else:
            stages[-1].instructions.append(ins)
    if not stages:
        raise DockerfileError("no FROM")
    return Dockerfile(stages, global_args)


def _unquote(value: str) -> str:
    value = value.strip()
    return shlex.split(value)[0] if value else ""


def key_values(value: str) -> dict[str, str]:
    """ENV/LABEL arguments: `k=v k2="v 2"` pairs, or the legacy `ENV key the value` form."""
    words = shlex.split(value)
    if words and "=" not in words[0]:
        return {words[0]: value.strip()[len(words[0]) :].strip()}
    out = {}
    for word in words:
        key, eq, val = word.partition("=")
        if not eq:
            raise DockerfileError(f"expected key=value, got {word!r} in {value!r}")
        out[key] = val
    return out


_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def substitute(value: str, variables: Mapping[str, str]) -> str:
    """Docker's `$VAR`, `${VAR}` and `${VAR:-default}`; an unknown variable becomes empty."""

    def repl(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("bare")
        if m.group("default") is not None:
            return variables.get(name) or m.group("default")
        return variables.get(name, "")

    return _VARIABLE.sub(repl, value)


def load(path: Path) -> Dockerfile:
    return parse_dockerfile(path.read_text())


# --- rules ------------------------------------------------------------------------------------------

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# An exact release: major.minor.patch, optionally followed by a variant (-slim-bookworm).
_EXACT_TAG = re.compile(r"^v?\d+\.\d+\.\d+(?:[-_.][A-Za-z0-9._-]+)?$")


def split_image_ref(ref: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of `repo[:tag][@digest]`; a registry port is not a tag."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest or None
    return name, None, digest or None


def pin_problems(df: Dockerfile) -> list[str]:
    """Every FROM names an earlier stage, a digest, or an exact version tag (a global ARG's default
    counts: `ARG BASE=python:3.11.14-slim` then `FROM ${BASE}` is pinned, and a build may override it)."""
    problems = []
    earlier: set[str] = set()
    for stage in df.stages:
        base = df.base_of(stage)
        if base.lower() in earlier or base == "scratch":
            pass
        elif "$" in base:
            problems.append(f"line {stage.line}: FROM {base}: a variable hides the version")
        else:
            _, tag, digest = split_image_ref(base)
            if digest is not None:
                if not _DIGEST.match(digest):
                    problems.append(f"line {stage.line}: FROM {base}: malformed digest")
            elif tag is None:
                problems.append(f"line {stage.line}: FROM {base}: no tag means `latest`")
            elif not _EXACT_TAG.match(tag):
                problems.append(f"line {stage.line}: FROM {base}: tag {tag!r} is not an exact version")
        earlier.add(stage.ref)
        earlier.add(str(stage.index))
    return problems


def syntax_problems(text: str) -> list[str]:
    """A `# syntax=` directive names a frontend image that the builder pulls: pinned like a FROM."""
    for line in text.splitlines():
        m = re.match(r"#\s*syntax\s*=\s*(\S+)", line.strip(), re.IGNORECASE)
        if m:
            return [p.replace("FROM", "syntax") for p in pin_problems(parse_dockerfile(f"FROM {m.group(1)}\n"))]
        if line.strip() and not line.strip().startswith("#"):
            break  # directives only precede the first instruction
    return []


def user_problems(stage: Stage) -> list[str]:
    """The stage runs as a numeric non-root uid:gid (runAsNonRoot can only verify numbers)."""
    user = stage.user()
    if user is None:
        return ["no USER: the container would run as root"]
    m = re.fullmatch(r"(\d+):(\d+)", user)
    if m is None:
        return [f"USER {user}: must be numeric uid:gid"]
    if int(m.group(1)) == 0 or int(m.group(2)) == 0:
        return [f"USER {user}: uid and gid must not be 0"]
    return []


def copy_problems(df: Dockerfile) -> list[str]:
    """The final stage takes only build artefacts: COPY --from an earlier stage, never the context
    (so no `COPY . .`), never that stage's source tree (its WORKDIR), and no ADD."""
    problems = []
    final = df.final
    earlier = {s.ref: s for s in df.stages[:-1]}
    for copy in final.copies():
        where = f"line {copy.line}: {copy.keyword} {' '.join(copy.sources)} {copy.dest}"
        if copy.keyword == "ADD":
            problems.append(f"{where}: ADD in the final stage")
            continue
        if copy.from_stage is None:
            problems.append(f"{where}: copies from the build context (the source tree)")
            continue
        source_stage = earlier.get(copy.from_stage.lower())
        if source_stage is None:
            problems.append(f"{where}: --from={copy.from_stage} is not an earlier stage")
            continue
        tree = source_stage.workdir()
        for src in copy.sources:
            normal = os.path.normpath(src)
            if not normal.startswith("/") or normal == "/":
                problems.append(f"{where}: {src} is not a build artefact's absolute path")
            elif tree is not None and (
                normal == tree or normal.startswith(tree.rstrip("/") + "/") or tree.startswith(normal.rstrip("/") + "/")
            ):
                problems.append(f"{where}: {src} is (or holds) the source tree {tree}")
    return problems


# System packages that compile things; a -dev package is headers for a compiler.
_BUILD_PACKAGES = {
    "build-essential",
    "gcc",
    "g++",
    "cc",
    "clang",
    "make",
    "cmake",
    "cpp",
    "binutils",
    "musl-dev",
    "libc-dev",
    "libc6-dev",
    "python3-dev",
    "git",
}
_PACKAGE_MANAGERS = {"apt-get", "apt", "aptitude", "apk", "yum", "dnf", "microdnf"}


def build_tool_problems(stage: Stage) -> list[str]:
    """No RUN of the stage installs a compiler, build tool or -dev package."""
    problems = []
    for command in stage.run_commands():
        words = shlex.split(command.replace(";", " ; ").replace("&&", " && "))
        installing = any(w in _PACKAGE_MANAGERS for w in words) and any(w in ("install", "add") for w in words)
        if not installing:
            continue
        for word in words:
            base = word.split("=", 1)[0]
            if base in _BUILD_PACKAGES or re.fullmatch(r"(gcc|g\+\+|clang)-\d+", base) or base.endswith("-dev"):
                problems.append(f"RUN {command!r}: installs {word}")
    return problems


def entrypoint_problems(stage: Stage, expected: list[str]) -> list[str]:
    entrypoints = stage.all("ENTRYPOINT")
    if not entrypoints:
        return ["no ENTRYPOINT"]
    argv = entrypoints[-1].exec_form()
    if argv is None:
        return [f"ENTRYPOINT {entrypoints[-1].value}: not the exec form (signals would go to a shell)"]
    if argv != expected:
        return [f"ENTRYPOINT {argv}: expected {expected}"]
    return []


OCI_LABELS = tuple(f"org.opencontainers.image.{k}" for k in ("title", "description", "source", "licenses", "version"))


def label_problems(stage: Stage, expected: Mapping[str, str]) -> list[str]:
    """Every OCI label is present and non-empty, and those in `expected` have that value."""
    labels = stage.labels()
    problems = [f"label {k} missing or empty" for k in OCI_LABELS if not labels.get(k)]
    problems += [
        f"label {k}={labels.get(k)!r}, expected {v!r}" for k, v in expected.items() if labels.get(k) and labels[k] != v
    ]
    return problems


# --- .dockerignore --------------------------------------------------------------------------------


@dataclass(frozen=True)
class IgnorePattern:
    text: str  # as cleaned by Docker
    exclusion: bool  # `!pattern`: re-admits what an earlier pattern left out
    regex: re.Pattern[str]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """moby/patternmatcher's translation: `**` spans directories, `*` and `?` stay within one."""
    out = "^"
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1 : i + 2] == "*":
                i += 1
                if pattern[i + 1 : i + 2] == "/":
                    i += 1
                out += ".*" if i + 1 >= len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        elif ch in ".+()|{}$^":
            out += "\\" + ch
        else:
            out += ch  # `[...]` classes pass through, as in Docker
        i += 1
    return re.compile(out + "$")


def parse_dockerignore(text: str) -> list[IgnorePattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        if exclusion:
            line = line[1:].strip()
        cleaned = os.path.normpath(line).replace(os.sep, "/")
        if len(cleaned) > 1 and cleaned.startswith("/"):
            cleaned = cleaned[1:]
        patterns.append(IgnorePattern(cleaned, exclusion, _pattern_regex(cleaned)))
    return patterns


def is_ignored(path: str, patterns: Iterable[IgnorePattern]) -> bool:
    """Whether the build context leaves out `path` (relative, `/`-separated): the last pattern
    matching the path or one of its parent directories decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for p in patterns:
        if any(p.regex.match(c) for c in candidates):
            ignored = not p.exclusion
    return ignored


def context_files(root: Path, patterns: list[IgnorePattern]) -> list[str]:
    """The files of `root` that `docker build root` sends (relative, `/`-separated, sorted).

    Directories that are ignored and that no `!` pattern can reach below are not walked.
    """
    reopeners = [p.text for p in patterns if p.exclusion]

    def may_reopen(directory: str) -> bool:
        for text in reopeners:
            literal = re.split(r"[*?\[\\]", text, maxsplit=1)[0]
            if literal != text and "/" not in literal:
                return True  # a wildcard in the first segment may match anything
            if literal.startswith(directory + "/") or text == directory:
                return True
        return False

    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(
            d for d in dirnames if not (is_ignored(prefix + d, patterns) and not may_reopen(prefix + d))
        )
        out += [prefix + f for f in filenames if not is_ignored(prefix + f, patterns)]
    return sorted(out)


# --- replaying RUN steps --------------------------------------------------------------------------


def and_chain(command: str) -> list[list[str]]:
    """`a && b && c` as argv lists; any other shell syntax is refused (the replay runs no shell)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    argvs: list[list[str]] = [[]]
    for token in lexer:
        if token == "&&":
            argvs.append([])
        elif token and set(token) <= set("();<>|&"):
            raise DockerfileError(f"cannot replay {command!r}: only `&&` chains are supported")
        else:
            argvs[-1].append(token)
    if any(not argv for argv in argvs):
        raise DockerfileError(f"cannot replay {command!r}: empty command")
    return argvs
