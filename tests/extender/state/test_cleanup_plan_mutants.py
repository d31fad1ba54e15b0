"""Rules of the cleanup's report (state/cleanup_plan.py) that mutation testing (mutmut) found no
test holding; each test fails on a one-line change to the module: a kind whose list failed quotes
its reasons joined by "; "."""

from __future__ import annotations

from gpuextender.extender.state.cleanup_plan import CleanupReport, Removal, lines


def test_a_failed_list_quotes_its_reasons_joined_by_semicolons() -> None:
    report = CleanupReport("gpu-extender.io/unusable", version="v1alpha3")
    report.rules = Removal(problems=["timed out", "forbidden"])
    assert lines(report)[0] == (
        "deleted 0 DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io/v1alpha3)"
        ": could not list them: timed out; forbidden"
    )
