#!/usr/bin/env bash
# Developer entry point. Creates ./.venv on first use (Python >= 3.11), installs the
# project with its test extras, then runs what you asked for:
#   ./dev.sh demo     local demo: extender + 3 fake-GPU agents and fake kubelets + a captured scheduler request
#   ./dev.sh test     the whole test suite (what CI runs)
#   ./dev.sh lint     formatting, lint, import boundaries and types (ruff, lint-imports, mypy; pyproject.toml)
#   ./dev.sh format   format and fix what ruff can (then ./dev.sh lint)
#   ./dev.sh bench    the benchmarks in bench/ (not part of the tests)
#   ./dev.sh mutate   mutation testing of the rules' modules (docs/testing.md); MUTANT globs narrow it
#   ./dev.sh proto    regenerate gpuextender/v1/*_pb2*.py
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=.venv

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "dev.sh: need Python >= 3.11 (set PYTHON=...)" >&2; exit 2; }
    "$PYTHON" -m venv "$VENV"
  fi
  # Reinstall only when pyproject.toml changed since the last install.
  if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e '.[test]'
    touch "$VENV/.installed"
  fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo)  ensure_venv; exec "$VENV/bin/python" examples/demo.py "$@" ;;
  test)  ensure_venv; exec "$VENV/bin/python" -m pytest "$@" ;;
  lint)  ensure_venv
         "$VENV/bin/ruff" format --check .
         "$VENV/bin/ruff" check .
         "$VENV/bin/lint-imports"
         exec "$VENV/bin/python" -m mypy "$@" ;;
  format) ensure_venv; "$VENV/bin/ruff" format .; exec "$VENV/bin/ruff" check --fix . ;;
  bench) ensure_venv; [ -x "$VENV/bin/go" ] || "$VENV/bin/python" -m pip install --quiet -e '.[test,bench]'
         exec "$VENV/bin/python" bench/run_all.py "$@" ;;
  proto) ensure_venv; exec "$VENV/bin/python" proto/generate.py "$@" ;;
  mutate) ensure_venv; [ -x "$VENV/bin/mutmut" ] || "$VENV/bin/python" -m pip install --quiet -e '.[test,mutate]'
         "$VENV/bin/mutmut" run "$@" || true  # (survivors are a result, not a failure of the run)
         "$VENV/bin/mutmut" results | grep -v ": not checked$" || true  # (a glob leaves the rest unchecked)
         "$VENV/bin/mutmut" export-cicd-stats >/dev/null
         exec "$VENV/bin/python" - <<'PY'
import json
s = json.load(open("mutants/mutmut-cicd-stats.json"))
judged = s["killed"] + s["survived"]
print(
    f"{judged + s['no_tests'] + s['timeout']} of {s['total']} mutants run: {s['killed']} killed, {s['survived']} "
    f"survived, {s['no_tests']} reached by no test, {s['timeout']} timed out; score "
    f"{100 * s['killed'] / max(judged, 1):.1f} % of those judged (the equivalent ones: docs/testing.md)"
)
PY
         ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
