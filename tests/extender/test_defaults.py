"""Every default is said once (issue 52 item 4): a settings field's default (settings.py, what code
that builds settings itself gets) is the value its flag gives when it is not passed (flags.py, what
`--help` shows), with or without --kubernetes (some defaults apply only there: --binding-wait,
--device-taints). A pair that differs fails here, naming the field."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuextender.extender.flags import build_config


def defaults(obj: Any, path: str = "") -> dict[str, Any]:
    """Each leaf field with a default: path -> (the settings' default, the value in `obj`)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(defaults(value, f"{path}{f.name}."))
        elif f.default is not dataclasses.MISSING:
            out[path + f.name] = (f.default, value)
        elif f.default_factory is not dataclasses.MISSING:
            out[path + f.name] = (f.default_factory(), value)
    return out


def test_each_settings_default_is_its_flags_default() -> None:
    plain, kube = defaults(build_config([])), defaults(build_config(["--kubernetes"]))
    assert plain.keys() == kube.keys() and len(plain) > 40  # (the check sees the settings)
    differ = {
        name: (default, value, kube[name][1])
        for name, (default, value) in plain.items()
        if default != value and default != kube[name][1]
    }
    assert differ == {}, "settings default != flag default (without / with --kubernetes)"


def test_the_ingest_workers_default_is_the_flags_auto_on_any_machine(monkeypatch: Any) -> None:
    """--ingest-workers auto depends on the CPUs: the settings' default follows the same rule (on a
    16-CPU machine 8 workers, never a fixed 1)."""
    from gpuextender.extender import flags, settings

    monkeypatch.setattr(flags, "usable_cpus", lambda: 16)
    monkeypatch.setattr(settings, "usable_cpus", lambda: 16)
    test_each_settings_default_is_its_flags_default()
    assert build_config([]).ingest_workers == settings.AUTO_INGEST_WORKERS_MAX == 8
