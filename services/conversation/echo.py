"""The agent's own voice is not the user: reference-based echo cancellation and an own-words check for barge-in.

When the reply leaks back into the caller's microphone (a speakerphone, a phone line without echo cancellation), the
server hears its own words 50-250 ms late and -20..-6 dB down, and without help it barges in on itself and answers
its own words. The server knows exactly what it sent, so it cancels that:

* ``EchoCanceller``: WebRTC's AEC3 (the ``pywebrtc-audio`` wheel; docs/conversation.md says why that one) on the
  caller's audio, with the reply audio the caller took as the reference (the far end). 16 kHz s16le mono in the
  dialogue; AEC3 works in 10 ms frames, so remainders of the 20-40 ms frames callers send are buffered.
* ``ReferenceTimeline``: puts the reply on the microphone's sample timeline. The server sees the mic as samples fed
  and the reply as chunks the caller took; a chunk taken when the mic stream is at sample P plays from
  max(P, end of the previous chunk) on (the caller's playback buffer). Mic samples [P, P+n) are processed with the
  reference samples of the same span (zeros where nothing plays); AEC3's delay estimator finds the rest (network,
  jitter buffer, playback: 50-250 ms measured, tests/conversation/test_echo.py).
* ``is_own_words``: a barge-in candidate whose recognized words are mostly a run of the reply's recent words is the
  agent hearing itself (what AEC leaves, or AEC turned off), so it must not interrupt.

The library is imported when an ``EchoCanceller`` is made, so a process that never cancels echo (the router without
a fallback session) does not need it; without it, ``EchoCancellerUnavailable`` names the package.
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
import re

import numpy as np

log = logging.getLogger("voicefleet.conversation.echo")

PACKAGE = "pywebrtc-audio"
PIN = "pywebrtc-audio==0.2.0"
# AEC3 runs at 16/32/48 kHz internally; a rate with a whole number of samples per 10 ms frame keeps its quality.
RATES = (8000, 16000, 32000, 48000)
FRAME_MS = 10
# How long after the last reply audio the caller's audio is still cancelled: the longest echo delay AEC3 finds
# (400 ms, tests/echo_line.py) plus a room's tail.
ECHO_TAIL_MS = 1000


class EchoCancellerUnavailable(RuntimeError):
    """The AEC library is not installed (install it, or turn echo cancellation off in the conversation config)."""


def _library():
    try:
        import pywebrtc_audio
    except ImportError as exc:
        raise EchoCancellerUnavailable(
            f"echo cancellation needs the {PACKAGE} wheel (WebRTC AEC3): pip install {PIN} (pinned in "
            "services/moss_sts/requirements-cpu.txt), or turn echo cancellation off in the conversation config"
        ) from exc
    return pywebrtc_audio


def ensure_available() -> None:
    """Raise ``EchoCancellerUnavailable`` (naming the package) unless the AEC library imports: for a check at start."""
    _library()


class ReferenceTimeline:
    """The reply audio (s16le samples) placed on the microphone's sample timeline.

    ``play(samples, at=P)`` queues a chunk the caller took while the mic stream was at sample P: it plays from
    max(P, end of what is queued) on, back to back with the chunk before (the caller's playback buffer), or after a
    gap of silence. ``take(start, count)`` gives the reference for mic samples [start, start+count): what plays
    there, zeros where nothing does; spans are taken in order and what is taken is forgotten.
    """

    def __init__(self) -> None:
        self._start = 0  # mic sample of self._samples[0]
        self._samples = np.zeros(0, dtype=np.int16)
        # Mic sample where the last reference audio ends (playing or played); far in the past until one plays.
        self.played_until = -(1 << 62)

    @property
    def end(self) -> int:
        """Mic sample at which the queued reference ends (where the next chunk plays from at the earliest)."""
        return self._start + len(self._samples)

    def play(self, samples: np.ndarray, at: int) -> int:
        """Queue ``samples`` (int16) taken while the mic was at sample ``at``; returns the sample it plays from."""
        begin = max(at, self.end)
        self.played_until = max(self.played_until, begin + len(samples))
        if len(self._samples) == 0:
            self._start = begin
            self._samples = np.asarray(samples, dtype=np.int16).copy()
        else:
            gap = np.zeros(begin - self.end, dtype=np.int16)
            self._samples = np.concatenate([self._samples, gap, np.asarray(samples, dtype=np.int16)])
        return begin

    def take(self, start: int, count: int) -> np.ndarray:
        """The reference for mic samples [start, start + count); everything before start + count is dropped."""
        out = np.zeros(count, dtype=np.int16)
        lo, hi = max(start, self._start), min(start + count, self.end)
        if hi > lo:
            out[lo - start : hi - start] = self._samples[lo - self._start : hi - self._start]
        drop = min(max(0, start + count - self._start), len(self._samples))
        self._samples = self._samples[drop:]
        self._start += drop
        return out

    def stop(self, at: int) -> None:
        """Playback stopped at mic sample ``at`` (a barge-in cut the reply): nothing queued after it plays."""
        if self.end > at:
            self._samples = self._samples[: max(0, at - self._start)]
        self.played_until = min(self.played_until, max(at, self._start))


class EchoLine:
    """Does this caller's line carry the reply back at all? Decided from the first second of reply audio, by how the
    level of the caller's audio follows the level of the reply (10 ms frames, lags up to ``MAX_LAG_MS``).

    A line with echo (a speakerphone, a phone line without cancellation) follows it closely (correlation 0.92-0.98 at
    the echo's delay, tests/echo_line.py's lines); a caller with their own echo cancellation (browsers, phones) or a headset does not, and AEC3's
    processing of such a line only harms the caller's speech over the reply (it mangled "stop please" into nothing the
    recognizers knew). ``echo``: None (undecided: cancel), True (cancel), False (leave the caller's audio alone).
    A line judged without echo is judged again if it starts to follow the reply later (a speaker turned on).
    The levels compared are those since the reply (this stretch of reply audio) began: the caller's own turn just
    before it, in the window too, follows nothing the agent played, and with it the correlation of a line that
    echoed at -20 dB read 0.0 at the decision (the echo then went to the recognizer uncancelled and interrupted
    the reply in the bench's echo trials).

    A quiet line is decided sooner: if the caller's level has not risen since before the reply while the reply played
    ``QUIET_AFTER_FRAMES`` (longer than any echo delay), nothing came back. Until a line is decided AEC3 works on it,
    and in its first second (no echo path learned yet) it suppresses whatever comes in while the reply plays: a lone
    "stop" 1.0 s into the reply, before the correlation had decided, came out ~20 dB down and was missed."""

    MAX_LAG_MS = 500
    WINDOW_FRAMES = 300  # 3 s of levels
    REPLY_GAP_FRAMES = 100  # 1 s with no audible reply ends a stretch of reply audio (the next one starts afresh)
    DECIDE_AFTER_FRAMES = 80  # 0.8 s of reply audio played
    ECHO_CORRELATION = (
        0.75  # measured: echo 0.92-0.98 (room or not, 50-250 ms, -20..-6 dB); a user over the reply <= 0.52
    )

    AUDIBLE = 100.0  # a reference frame this loud (RMS, about -50 dBFS) is reply audio playing
    QUIET_AFTER_FRAMES = 45  # 450 ms: past the longest echo delay AEC3 finds (400 ms, tests/echo_line.py)
    QUIET_RISE = 2.0  # the caller's level rose less than 6 dB over its level before the reply started ...
    QUIET_FLOOR = 30.0  # ... or stayed below about -61 dBFS (digital silence, a quiet line's noise)
    REJUDGE_FRAMES = 150  # a no-echo line is judged again on 1.5 s of audible reply at least ...
    REJUDGE_COVERAGE = 0.6  # ... through 60 % of which the caller's level stood raised (echo is wherever the reply is)

    def __init__(self) -> None:
        self.echo: bool | None = None
        self.correlation = 0.0
        self._mic: list[float] = []
        self._ref: list[float] = []
        self._stretch = 0  # frames since this stretch of reply audio began (0: none playing)
        self._inaudible = 0  # frames since the reply was last audible
        self._active = 0  # frames of audible reply seen
        self._since_check = 0
        self._before: list[float] = []  # the caller's levels before the first audible reply frame (the last 0.5 s)
        self._playing = -1  # frames since the first audible reply frame (-1: none yet)
        self._baseline = 0.0
        self._peak = 0.0  # the caller's loudest frame since the reply started

    def observe(self, near: np.ndarray, far: np.ndarray, frame: int) -> None:
        n = len(near) // frame
        if n == 0:
            return
        mic = np.sqrt(np.mean(near[: n * frame].reshape(n, frame).astype(np.float32) ** 2, axis=1))
        ref = np.sqrt(np.mean(far[: n * frame].reshape(n, frame).astype(np.float32) ** 2, axis=1))
        self._mic.extend(mic.tolist())
        self._ref.extend(ref.tolist())
        del self._mic[: -self.WINDOW_FRAMES], self._ref[: -self.WINDOW_FRAMES]
        audible = ref > self.AUDIBLE
        self._active += int(np.count_nonzero(audible))
        self._follow_stretch(audible)
        self._since_check += n
        self._observe_quiet(mic, ref)
        if self._active < self.DECIDE_AFTER_FRAMES or self._since_check < 25 or self.echo is True:
            return
        if 0 < self._stretch < self.DECIDE_AFTER_FRAMES:
            return  # a new stretch of reply audio: too few of its frames yet to say whether the line follows it
        self._since_check = 0
        self.correlation, lag = self._best_correlation()
        judged = self.echo
        if self.correlation >= self.ECHO_CORRELATION and (self.echo is None or self._follows_throughout(lag)):
            self.echo = True
        elif self.echo is None:
            self.echo = False
        if self.echo != judged:  # a decision, not every check (~4 a second while the reply plays)
            log.debug("echo line: correlation %.2f -> echo %s", self.correlation, self.echo)

    def _observe_quiet(self, mic: np.ndarray, ref: np.ndarray) -> None:
        """The quiet-line rule (see the class): decided False once the reply played QUIET_AFTER_FRAMES with the
        caller's level where it was."""
        for level, reference in zip(mic.tolist(), ref.tolist(), strict=True):
            if self._playing < 0:
                if reference <= self.AUDIBLE:
                    self._before = [*self._before[-49:], level]
                    continue
                self._playing = 0
                self._baseline = float(np.median(self._before)) if self._before else 0.0
            self._playing += 1
            self._peak = max(self._peak, level)
        if self.echo is None and self._playing >= self.QUIET_AFTER_FRAMES and self._peak <= self._raised_above:
            self.echo = False
            log.debug("echo line: quiet while the reply played %d frames -> no echo", self._playing)

    @property
    def _raised_above(self) -> float:
        """The caller's level above which it has risen since before the reply (QUIET_RISE, QUIET_FLOOR)."""
        return max(self.QUIET_FLOOR, self.QUIET_RISE * self._baseline)

    def _follow_stretch(self, audible_frames: np.ndarray) -> None:
        for audible in audible_frames.tolist():
            self._inaudible = 0 if audible else self._inaudible + 1
            if self._stretch:
                self._stretch = 0 if self._inaudible >= self.REPLY_GAP_FRAMES else self._stretch + 1
            elif audible:
                self._stretch = 1

    def _window(self) -> tuple[np.ndarray, np.ndarray]:
        """The caller's and the reply's levels since this stretch of reply audio began."""
        since = min(len(self._mic), self._stretch) if self._stretch else len(self._mic)
        return np.asarray(self._mic[len(self._mic) - since :]), np.asarray(self._ref[len(self._ref) - since :])

    def _best_correlation(self) -> tuple[float, int]:
        """The best correlation of the caller's level with the reply's, at lags up to MAX_LAG_MS (in frames), over the
        frames since this stretch of reply audio began; and its lag."""
        mic, ref = self._window()
        best, best_lag = 0.0, 0
        for lag in range(0, min(self.MAX_LAG_MS // FRAME_MS, len(mic) - 20)):
            m, r = mic[lag:], ref[: len(ref) - lag]
            if np.std(m) < 1e-6 or np.std(r) < 1e-6:
                continue
            c = float(np.corrcoef(m, r)[0, 1])
            if c > best:
                best, best_lag = c, lag
        return best, best_lag

    def _follows_throughout(self, lag: int) -> bool:
        """A line judged without echo is judged an echo line again only if the caller's level stood above where it
        was before the reply through most of the reply's audible frames (at the echo's lag), over at least
        REJUDGE_FRAMES of them: echo comes back wherever the reply is heard. A user's own short speech over the reply
        (a backchannel) can follow it closely for a moment: "Mm-hm." read 0.85 on a digitally silent line, and the
        line's AEC3 then took apart the "Stop please." after it (docs/conversation.md, Echo)."""
        mic, ref = self._window()
        m, r = mic[lag:], ref[: len(ref) - lag]
        audible = r > self.AUDIBLE
        if np.count_nonzero(audible) < self.REJUDGE_FRAMES:
            return False
        raised = m[audible] > self._raised_above
        return float(np.mean(raised)) >= self.REJUDGE_COVERAGE


class EchoCanceller:
    """One session's echo canceller: ``render`` the reply audio the caller took, ``process`` the caller's audio.

    Both are s16le mono at ``rate`` (the dialogue resamples to 16 kHz). ``process`` returns the audio with the
    rendered audio's echo removed, in whole 10 ms frames: a remainder waits for the next call, so the output lags the
    input by less than 10 ms and totals the same length once frames line up. Not thread-safe (one per session).
    """

    def __init__(self, rate: int = 16000):
        if rate not in RATES:
            raise ValueError(f"rate: {rate} Hz is not one of {RATES} (AEC3 works in whole 10 ms frames)")
        self.rate = rate
        self._frame = rate * FRAME_MS // 1000
        # stream_delay_ms 0: AEC3's own delay estimator finds the echo's delay (the timeline already puts the
        # reference where the caller's playback starts, so what is left is network + playback delay).
        self._aec = _library().EchoCanceller(sample_rate=rate, num_channels=1, stream_delay_ms=0)
        self._timeline = ReferenceTimeline()
        self._fed = bytearray()  # mic bytes short of a whole frame
        self._mic_bytes = 0  # mic bytes given to process() so far: "now" on the mic timeline
        self._processed = 0  # mic samples through AEC3 so far
        self._tail = rate * ECHO_TAIL_MS // 1000
        self.line = EchoLine()

    @property
    def position(self) -> int:
        """Mic samples given to ``process`` so far (where a chunk rendered now starts playing at the earliest)."""
        return self._mic_bytes // 2

    def render(self, pcm: bytes) -> None:
        """The caller took ``pcm`` (reply audio) now: it is the reference from the mic's current position on."""
        if len(pcm) % 2:
            raise ValueError("pcm: s16le reply audio needs an even number of bytes")
        self._timeline.play(np.frombuffer(pcm, dtype=np.int16), at=self.position)

    def stop_render(self) -> None:
        """The caller's playback was cut (barge-in, interrupt): the reference queued after now is dropped, so AEC3
        does not expect echo of audio that never plays (it would suppress the user's words in its place)."""
        self._timeline.stop(self.position)

    def process(self, pcm: bytes) -> bytes:
        """The caller's audio ``pcm`` with the echo of the rendered audio removed (whole 10 ms frames, see class)."""
        if self._aec is None:
            raise RuntimeError("EchoCanceller is closed")
        self._mic_bytes += len(pcm)
        self._fed += pcm
        count = len(self._fed) // (2 * self._frame) * self._frame
        if count == 0:
            return b""
        near = np.frombuffer(bytes(self._fed[: 2 * count]), dtype=np.int16)
        del self._fed[: 2 * count]
        start = self._processed
        far = self._timeline.take(start, count)
        self._processed += count
        cleaned = self._aec.process(near, far)
        self.line.observe(near, far, self._frame)
        if self.line.echo is False or start >= self._timeline.played_until + self._tail:
            # No reply audio for a while, so no echo to cancel: the caller's audio goes on untouched. AEC3 still
            # sees it (its state stays adapted), but its processing of a line without echo changes speech enough
            # to move the turn model (0.04 -> 0.64 on a cut sentence) and drop a word at a pause.
            return near.tobytes()
        return cleaned.tobytes()

    def close(self) -> None:
        """Free the AEC state; ``process`` after this raises."""
        self._aec = None
        self._fed.clear()


# --- own words ---------------------------------------------------------------------------------------------------

# A heard word matches a reply word when equal, or (both 4+ letters) when close: ASR errors on echo are mostly
# inflections and near-spellings ("platforms" for "platform", "leave" for "leaves"); short words must match exactly.
_CLOSE = 0.75
_DIGITS = "zero one two three four five six seven eight nine".split()
# Homophones the recognizer swaps freely, one spelling each.
_SAME_SOUND = {
    "for": "four",
    "fore": "four",
    "to": "two",
    "too": "two",
    "ate": "eight",
    "won": "one",
    "write": "right",
    "their": "there",
    "they're": "there",
    "know": "no",
    "here": "hear",
    "buy": "by",
    "bye": "by",
    "sea": "see",
    "its": "it's",
    "u": "you",
    "ok": "okay",
}
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> list[str]:
    """Lower case, punctuation stripped, each digit spelled out (ASR writes "4" where the reply said "four")."""
    out: list[str] = []
    for token in _WORD.findall(text.lower().replace("-", " ")):
        token = token.strip("'")
        if token.isdigit():
            out.extend(_DIGITS[int(d)] for d in token)
        elif token:
            out.append(_SAME_SOUND.get(token, token))
    return out


@functools.lru_cache(maxsize=65536)  # interims repeat the same words, turn after turn
def _same(heard: str, said: str) -> bool:
    if heard == said:
        return True
    if min(len(heard), len(said)) < 4 or 2 * min(len(heard), len(said)) < _CLOSE * (len(heard) + len(said)):
        return False  # short words must be equal; lengths this far apart cannot reach the ratio
    return difflib.SequenceMatcher(None, heard, said).ratio() >= _CLOSE


def _in_order(matches: list[list[bool]], lo: int, hi: int) -> int:
    """Most heard words found in order among reply words [lo, hi): a longest common subsequence over ``matches``
    (heard word i matches reply word j)."""
    row = [0] * (hi - lo + 1)
    for heard_row in matches:
        prev_diag = 0
        for j in range(1, hi - lo + 1):
            same = heard_row[lo + j - 1]
            prev_diag, row[j] = row[j], prev_diag + 1 if same else max(row[j], row[j - 1])
    return row[-1]


def is_own_words(heard: str, reply_text: str, *, recent_words: int = 60, min_fraction: float = 0.6) -> bool:
    """True when ``heard`` (a barge-in candidate's interim or final transcript) is the agent hearing its own reply.

    ``reply_text`` is the reply the caller has been sent (e.g. ``heard_text`` of the pieces sent); only its last
    ``recent_words`` words count (about 20 s of speech: echo is of what was just played). The rule, on normalised
    words (lower case, no punctuation, digits spelled out):

    * at least ``min_fraction`` (60 %) of the heard words appear in order within one stretch of the recent reply
      words a little longer than what was heard (n heard words: n + max(2, n // 2) reply words). Echo transcripts
      are runs of the reply with ASR errors (a word dropped, changed, split), so most of their words line up; a
      user's own sentence shares a few common words with the reply at most, scattered, not in one short stretch;
    * up to three heard words must all match: short phrases are mostly common words ("what about tomorrow" vs a
      reply with "what ... about"), so a part proves nothing. A lone "stop" is the user unless the agent just said
      "stop" itself; then nothing on the line tells the two apart and the echo is the likelier;
    * nothing heard -> False (there is nothing to refuse).
    """
    heard_words = _words(heard)
    said = _words(reply_text)[-recent_words:]
    if not heard_words or not said:
        return False
    n = len(heard_words)
    needed = n if n <= 3 else math.ceil(n * min_fraction)
    span = n + max(2, n // 2)
    # Word pairs compared once (fuzzy matching is the cost), then every stretch of the reply is scored from them.
    matches = [[_same(h, w) for w in said] for h in heard_words]
    if sum(any(row) for row in matches) < needed:
        return False
    return any(
        _in_order(matches, start, min(start + span, len(said))) >= needed
        for start in range(max(1, len(said) - span + 1))
    )
