"""Whether a committed benchmark run is still about the code (issue 48): each benchmark the README quotes declares the
paths it measures, and a run is stale once any of them changed after the commit it ran at.

The commit a run ran at is its machine's ``commit`` (bench.harness.machine records it); runs made before that was
recorded are dated by the commit that last changed their JSON (results are committed right after their run, so the
code they measured is that commit's or older). The README says which quoted runs are stale (bench/readme.py
``STALE``), and tests/project/test_bench_claims.py fails when that list is not what git says: a change to measured
code either comes with a re-run or marks the row stale.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.harness import RESULTS
from bench.harness import git as _git

ROOT = Path(__file__).resolve().parent.parent

_TTS = ("services/common/tts_servicer.py", "services/common/scheduler.py", "services/common/text.py")
_ASR = ("services/engines/asr", "services/asr", "services/common/asr_servicer.py", "services/common/endpointing.py")
# What each quoted benchmark measures: a change under any of these paths makes its committed run stale.
MEASURES: dict[str, tuple[str, ...]] = {
    "tts_ttfa": ("services/cosyvoice_tts", "services/engines/piper_engine.py", "services/router", *_TTS),
    "qwen_tts": ("services/qwen_tts", "services/engines/espeak.py", "services/engines/espeak_engine.py", *_TTS),
    "tts_streaming": ("services/cosyvoice_tts", "services/engines/piper_engine.py", *_TTS),
    "asr": _ASR,
    "asr_noise": _ASR,
    "asr_mandarin": _ASR,
    "conversation": (
        "services/conversation",
        "services/moss_sts",
        "services/brain",
        "services/router",
        "services/common/sts_servicer.py",
        "services/engines/piper_engine.py",
        *_ASR,
    ),
    "router": ("services/router", "services/remote"),
    "leases": ("services/residency", "services/router/service.py"),
    "brain": ("services/brain",),
    "gateway": ("services/gateway",),
    "memory": ("services",),
    "swap": ("services/residency", "services/cosyvoice_tts", "services/qwen_tts", "services/moss_sts"),
}


def no_history() -> str | None:
    """Why git cannot date the runs here (None: it can)."""
    try:
        if _git("rev-parse", "--is-shallow-repository") == "true":
            return "a shallow clone: its history cannot say when the measured code changed"
    except (OSError, subprocess.CalledProcessError) as e:
        return f"no git history here ({e})"
    return None


def run_commit(bench: str, report: dict, directory: Path = RESULTS) -> str:
    """The commit the run of ``bench`` measured (short id)."""
    recorded = report["machine"].get("commit")
    if recorded:
        return recorded[:7]
    path = (directory / f"{bench}.json").resolve().relative_to(ROOT)
    return _git("log", "-1", "--format=%h", "--abbrev=7", "--", str(path))


def changed_since(commit: str, paths: tuple[str, ...]) -> list[str]:
    """The commits after ``commit`` that touch ``paths`` (oldest last), and "uncommitted" for edits not committed.
    Commits whose changes were undone since (the paths are as they were at ``commit``: a change and its revert) do
    not count: the code the run measured is the code there is."""
    same = _git("diff", "--stat", commit, "HEAD", "--", *paths) == ""
    changed = [] if same else _git("log", "--format=%h", f"{commit}..HEAD", "--", *paths).split()
    if _git("status", "--porcelain", "--untracked-files=no", "--", *paths):  # files git keeps, edited
        changed.insert(0, "uncommitted")
    return changed
