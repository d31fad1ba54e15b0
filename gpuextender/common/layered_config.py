"""One precedence rule for both programs' settings: flag > environment > config file > default.

Every long flag of a program's parser is also a setting:
- an environment variable, the program's prefix plus the flag in capitals with `_` for `-`
  (`--stale-after` -> `GPU_EXTENDER_STALE_AFTER=20`); a repeatable flag takes a comma-separated
  list, an on/off flag one of true/false, 1/0, yes/no, on/off;
- a key of the YAML mapping in `--config FILE` (or `<PREFIX>CONFIG`): the flag without its dashes,
  with `-` or `_` (`stale-after: 20`), a list for a repeatable flag, a YAML boolean for an on/off one.

Values from the environment and the file go through the flag's own parsing (types, choices), so
the programs validate one Namespace whatever its sources, and an error names where the value came
from. A source replaces a lower one's value whole: `--gpu-resource` on the command line replaces
the file's list instead of adding to it. Unknown file keys are refused (a typo must not silently
keep a default); unknown variables with the prefix are ignored, because Kubernetes' service links
put `GPU_EXTENDER_SERVICE_HOST` and the like into pods of the namespace.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

# A config file is a page of settings; anything larger is a mistake (or an attack on start-up).
MAX_CONFIG_BYTES = 256 * 1024
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


class SettingsError(ValueError):
    """A setting from the environment or the config file is wrong; the message names its source."""


@dataclass(slots=True)
class Layered:
    """The parsed settings, and where each one that is not its default came from."""

    args: argparse.Namespace
    sources: dict[str, str] = field(default_factory=dict)  # dest -> "flag" | "env NAME" | "file PATH"


def env_name(prefix: str, flag: str) -> str:
    return prefix + flag.lstrip("-").upper().replace("-", "_")


def epilog(prefix: str, example_flag: str, example_value: str) -> str:
    """The --help paragraph that states the rule."""
    key = example_flag.lstrip("-")
    return (
        f"Every flag can also be set in the environment as {prefix}<FLAG> ({env_name(prefix, example_flag)}="
        f"{example_value}; repeatable flags take a comma-separated list, on/off flags true or false) or in "
        f"the YAML file given with --config or {prefix}CONFIG ({key}: {example_value}). Precedence: flag > "
        "environment > config file > default."
    )


def parse_layered(
    build_parser: Callable[[], argparse.ArgumentParser],
    argv: Sequence[str],
    env: Mapping[str, str],
    prefix: str,
    not_settings: Iterable[str] = (),
) -> Layered:
    """Parse `argv` over the environment and the config file. `build_parser` is called for each
    source (argparse parsers cannot be copied); it must define `--config`. `not_settings`: dests
    that only a flag may set (one-shot commands). Command-line errors exit as argparse does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    settable = _settable(parser, {"help", "version", "config", *not_settings})
    explicit = _explicit(build_parser, list(argv), "command line", raise_errors=False)
    config_path: Path | None = args.config
    config_source = "--config"
    if config_path is None and env.get(prefix + "CONFIG", "").strip():
        config_path, config_source = Path(env[prefix + "CONFIG"].strip()), f"{prefix}CONFIG"
        args.config = config_path
    layers: list[tuple[str, dict[str, Any]]] = []
    if config_path is not None:
        tokens = _file_tokens(config_path, config_source, settable)
        layers.append(
            (f"file {config_path}", _values(build_parser, tokens, settable, f"{config_source} {config_path}"))
        )
    env_layer: dict[str, Any] = {}
    for dest, action in settable.items():
        name = env_name(prefix, _long_flag(action))
        if name in env:
            env_layer.update(
                _values(build_parser, {dest: _tokens(action, env[name], from_env=True, where=name)}, settable, name)
            )
    layers.append(("env", env_layer))
    result = Layered(args, {dest: "flag" for dest in explicit})
    for source, values in layers:
        for dest, value in values.items():
            if dest not in explicit:
                setattr(args, dest, value)
                result.sources[dest] = (
                    source if source != "env" else f"env {env_name(prefix, _long_flag(settable[dest]))}"
                )
    return result


def describe_sources(sources: Iterable[tuple[str, str]]) -> str:
    """`stale-after (env GPU_EXTENDER_STALE_AFTER), shortlist (file /etc/x.yaml)` for the start-up log."""
    return ", ".join(f"{dest.replace('_', '-')} ({source})" for dest, source in sources)


def _settable(parser: argparse.ArgumentParser, excluded: set[str]) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in excluded}


def _long_flag(action: argparse.Action) -> str:
    return next(s for s in action.option_strings if s.startswith("--"))  # BooleanOptionalAction: --x first


def _is_switch(action: argparse.Action) -> bool:
    return action.nargs == 0  # store_true/false, store_const, BooleanOptionalAction


def _tokens(action: argparse.Action, value: Any, *, from_env: bool, where: str) -> list[str]:
    """The command-line tokens that say what `value` says for this flag."""
    flag = _long_flag(action)
    if _is_switch(action):
        on = _boolean(value, where) if from_env or not isinstance(value, bool) else value
        if on:
            return [flag]
        if isinstance(action, argparse.BooleanOptionalAction):
            return [f"--no-{flag[2:]}"]
        return []  # store_true left off: the caller records False
    if isinstance(action, argparse._AppendAction):
        if from_env:
            items = [v.strip() for v in str(value).split(",") if v.strip()]
        elif isinstance(value, list):
            items = [_scalar(v, where) for v in value]
        else:
            items = [_scalar(value, where)]
        return [f"{flag}={item}" for item in items]
    return [f"{flag}={value if from_env else _scalar(value, where)}"]


def _boolean(value: Any, where: str) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{where}: {value!r} is not on/off (true/false, 1/0, yes/no, on/off)")


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):  # YAML 1.1 reads unquoted off/on/yes/no as booleans
        raise SettingsError(f'{where}: expected a single value (text or number), got {value!r}: quote a word, as "off"')
    if not isinstance(value, (str, int, float)):
        raise SettingsError(f"{where}: expected a single value (text or number), got {type(value).__name__}")
    return str(value)


def _file_tokens(path: Path, source: str, settable: dict[str, argparse.Action]) -> dict[str, list[str]]:
    import yaml  # only with a config file: the agent keeps PyYAML (~2 MiB) out of its memory otherwise

    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise SettingsError(f"{source} {path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise SettingsError(
            f"{source} {path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; a config file holds settings only"
        )
    try:
        # libyaml's loader when PyYAML has it: it refuses deep nesting itself; the pure-Python one
        # recurses, and 120 KB of '[' would end start-up in a RecursionError traceback.
        document = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise SettingsError(f"{source} {path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise SettingsError(f"{source} {path}: nested too deeply to be a file of settings") from None
    if document is None:
        return {}  # an empty file sets nothing
    if not isinstance(document, dict):
        raise SettingsError(
            f"{source} {path}: expected a mapping of settings (stale-after: 20), got {type(document).__name__}"
        )
    by_key = {_long_flag(a)[2:]: (dest, a) for dest, a in settable.items()}
    tokens: dict[str, list[str]] = {}
    for key, value in document.items():
        name = str(key).replace("_", "-")
        if name not in by_key:
            raise SettingsError(
                f"{source} {path}: unknown setting {key!r} (settings are the long flags without '--', see --help)"
            )
        dest, action = by_key[name]
        tokens[dest] = _tokens(action, value, from_env=False, where=f"{source} {path}: {key}")
    return tokens


def _values(
    build_parser: Callable[[], argparse.ArgumentParser],
    tokens: dict[str, list[str]],
    settable: dict[str, argparse.Action],
    where: str,
) -> dict[str, Any]:
    """Parse one source's tokens with the flags' own types and choices; errors name `where`."""
    values = _explicit(build_parser, [t for ts in tokens.values() for t in ts], where, raise_errors=True)
    for dest in tokens:
        if dest not in values:  # set to nothing: an on/off flag switched off, or an empty list
            values[dest] = [] if isinstance(settable[dest], argparse._AppendAction) else False
    return values


def _explicit(
    build_parser: Callable[[], argparse.ArgumentParser], tokens: list[str], where: str, *, raise_errors: bool
) -> dict[str, Any]:
    """Only the settings `tokens` set (every default suppressed)."""
    parser = build_parser()
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    if raise_errors:

        def error(message: str) -> NoReturn:
            raise SettingsError(f"{where}: {message}")

        parser.error = error  # type: ignore[method-assign]
    return vars(parser.parse_args(tokens))
