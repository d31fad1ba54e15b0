"""`gpu-extender explain` argument and error handling (the happy path runs in the e2e tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuextender.extender import explain_cli


def test_unreadable_request_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_cli.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_bad_ca_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "request.json"
    request.write_text("{}")
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate")
    assert explain_cli.main([str(request), "--url", "https://127.0.0.1:1", "--cacert", str(bad)]) == 2
    assert f"--cacert {bad}:" in capsys.readouterr().err


def test_unreachable_extender(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "request.json"
    request.write_text("{}")
    assert explain_cli.main([str(request), "--url", "http://127.0.0.1:1", "--timeout", "2"]) == 2
    assert "cannot reach http://127.0.0.1:1/explain" in capsys.readouterr().err
