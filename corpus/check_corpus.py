"""Check every case in corpus/logs: sidecar schema, label vocabulary, source, no duplicates, no secrets.

Run: python corpus/check_corpus.py [corpus/logs]   (exit 0: all cases valid; 1: problems listed)
Needs only the standard library, so it runs before the package is installed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PHASES = {
    "environment",
    "network_communication",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "timeout",
    "serving_prefill",
    "serving_decode",
    "cache_pressure",
    "not_oom_other",
    "healthy",
    "unknown",
}
CONFIDENCES = {"high", "medium", "low"}
# Triage's serving phases say where a request's memory ran out (prefill or decode): every such label is an OOM.
SERVING_OOM_PHASES = {"serving_prefill", "serving_decode"}
REQUIRED = ("id", "source_url", "excerpt_from", "vllm_version", "label")
LABEL_REQUIRED = ("phase", "is_oom", "root_cause", "confidence", "confidence_reason")
# A public page with an address: a GitHub thread, a forum or Q&A thread, a user's own post. The testbed's logs are
# named by their path in ../shared.
SOURCE = re.compile(r"^(https://[a-z0-9.-]+\.[a-z]{2,}/\S+|oomkit-testbed:\S+)$")
# Sites that copy GitHub threads: a case from one is the GitHub thread itself, cited by its GitHub address, so that
# the duplicate check sees it.
MIRRORS = re.compile(r"^https://(www\.)?(stepcodex\.com|github\.saobby\.my\.eu\.org|github\.cotory\.com)/")
# Tokens that must never be stored: Hugging Face, OpenAI-style, GitHub and AWS keys.
SECRET = re.compile(r"\b(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16})\b")
MIN_LOG_LINES = 1  # a log that is one OOM line is a real case (issue 13)


def case_problems(sidecar: Path) -> list[str]:
    """Problems of one case (its sidecar and its log), each a readable sentence."""
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return [f"{sidecar.name}: not readable JSON ({exc})"]
    problems = [f"{sidecar.name}: missing key {key!r}" for key in REQUIRED if key not in meta]
    if meta.get("id") != sidecar.stem:
        problems.append(f"{sidecar.name}: id {meta.get('id')!r} differs from the file name")
    if not SOURCE.match(str(meta.get("source_url") or "")):
        problems.append(f"{sidecar.name}: source_url {meta.get('source_url')!r} is not a public thread URL")
    elif MIRRORS.match(str(meta["source_url"])):
        problems.append(f"{sidecar.name}: source_url {meta['source_url']!r} mirrors a GitHub thread; cite that thread")
    problems += _label_problems(sidecar.name, meta.get("label") or {})
    problems += _log_problems(sidecar.with_suffix(".log"))
    return problems


def _label_problems(name: str, label: dict) -> list[str]:
    problems = [f"{name}: label lacks {key!r}" for key in LABEL_REQUIRED if key not in label]
    if label.get("phase") not in PHASES:
        problems.append(f"{name}: label.phase {label.get('phase')!r} is not one of the triage phases")
    if label.get("confidence") not in CONFIDENCES:
        problems.append(f"{name}: label.confidence {label.get('confidence')!r} is not high/medium/low")
    if not isinstance(label.get("is_oom"), bool):
        problems.append(f"{name}: label.is_oom must be true or false")
    if label.get("phase") in SERVING_OOM_PHASES and label.get("is_oom") is False:
        problems.append(
            f"{name}: label.phase {label['phase']!r} is out of memory while serving; a crash while serving that is not "
            "out of memory is 'not_oom_other'"
        )
    return problems


def _log_problems(log: Path) -> list[str]:
    if not log.exists():
        return [f"{log.name}: the log file is missing"]
    text = log.read_text(encoding="utf-8", errors="replace")
    problems = []
    if len([line for line in text.splitlines() if line.strip()]) < MIN_LOG_LINES:
        problems.append(f"{log.name}: fewer than {MIN_LOG_LINES} non-empty lines")
    if SECRET.search(text):
        problems.append(f"{log.name}: holds what looks like a secret token; redact it as <redacted>")
    return problems


GITHUB_THREAD = re.compile(r"^https://github\.com/([^/]+/[^/]+)/(issues|pull|discussions)/(\d+)")
# Discourse (discuss.vllm.ai) names a topic by its number; the slug may change and a post number may follow.
DISCOURSE_TOPIC = re.compile(r"^https://discuss\.vllm\.ai/t/(?:[^/]*[^/\d][^/]*/)?(\d+)")


def _thread_of(url: str) -> str:
    """GitHub's owner and repository names are case-insensitive (github.com/A/B/issues/1 is github.com/a/b/issues/1);
    a forum topic is its number, whatever slug or post number its address carries."""
    match = GITHUB_THREAD.match(url)
    if match:
        return f"https://github.com/{match[1].lower()}/{match[2]}/{match[3]}"
    topic = DISCOURSE_TOPIC.match(url)
    return f"https://discuss.vllm.ai/t/{topic[1]}" if topic else url


def duplicate_sources(sidecars: list[Path]) -> list[str]:
    """Two public cases from one thread would let one thread sit on both sides of the split."""
    seen: dict[str, str] = {}
    problems = []
    for sidecar in sidecars:
        try:
            url = json.loads(sidecar.read_text(encoding="utf-8")).get("source_url") or ""
        except (OSError, json.JSONDecodeError):
            continue
        if url.startswith("oomkit-testbed:"):
            continue
        thread = _thread_of(url)
        if thread in seen:
            problems.append(f"{sidecar.name}: same thread as {seen[thread]} ({url})")
        seen.setdefault(thread, sidecar.name)
    return problems


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent / "logs"
    sidecars = sorted(folder.glob("*.json"))
    problems = [p for sidecar in sidecars for p in case_problems(sidecar)] + duplicate_sources(sidecars)
    orphans = [log.name for log in folder.glob("*.log") if not log.with_suffix(".json").exists()]
    problems += [f"{name}: a log without a sidecar" for name in orphans]
    for problem in problems:
        print(problem)
    print(f"{len(sidecars)} cases, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
