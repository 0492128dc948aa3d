"""The words judgement: at a candidate end of turn, the reply model reads the user's words so far and says whether
they end the turn (docs/conversation.md#the-words-judgement).

The turn model (Smart Turn, in the asr engine) hears a pause's sound; on real speech it calls many mid-phrase pauses
complete ("please call me back when | you get home" after "when": p 0.97 on a 2-core AMD EPYC,
bench/results/cpu-probes-2026-11-28-amd/cuts.log), and the text check beside it knows only closed-class words. A
language model reads the whole phrase: the brain's ``/v1/end_of_turn`` (``ChatBrain.end_of_turn_logprob``) gives
log P(the words end here) from the in-box SmolLM2-135M-Instruct, and below ``moss_sts.brain_turn_logprob`` (-3.0) the
words read unfinished (48 of 48 whole requests read finished and 353 of 405 cut mid-phrase unfinished,
bench/results/turn-words-2026-11-28/). A turn whose words read unfinished waits for more speech up to the
endpointing's ``max_silence_ms`` after its speech ended instead of ``turn_commit_ms``; its held reply is still made
meanwhile, so a turn that was over after all costs the wait and no more.

One judgement at a time per session: a new candidate cancels the one before. The held reply's brain request waits
for the judgement (at most ``JUDGEMENT_WAIT_MS``): the in-box brain serves one request at a time and a streamed reply
holds it to its end, so the reading goes first (and leaves the words' prompt in its cache for the reply). The commit
waits for it at most ``JUDGEMENT_WAIT_MS`` past the commit time or past the judgement's start, whichever is later (a
final that came late still gets its reading), then goes on without it (a slow or failed brain never stalls a turn). Counted in
``voicefleet_sts_words_judgements_total{verdict="finished"|"doubtful"|"unfinished"|"unknown"|"late"}`` (late: the commit went
on without it).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.common import metrics

log = logging.getLogger("voicefleet.conversation.turn_words")

#: How long past its commit time (or past the reading's start, when later) a turn waits for the brain's reading of
#: its words before committing without it.
JUDGEMENT_WAIT_MS = 400

#: The recognizer's confidence (mean token probability) its weight is counted from: above it the words count for more.
CONFIDENCE_PIVOT = 0.8

#: The turn model's probability is read within [1e-3, 1 - 1e-3]: its log-odds are at most this far from 0.
SOUND_LOGODDS_MAX = math.log(999)


@dataclass(frozen=True)
class TurnSigns:
    """What else is known of a candidate end of turn besides its words: ``sound``, the turn model's probability that
    the pause ends the turn (its last judgement of that utterance; None: it did not judge, as in silence mode), and
    ``confidence``, the recognizer's confidence in the words (its final's mean token probability; None: unknown)."""

    sound: float | None = None
    confidence: float | None = None


@dataclass(frozen=True)
class SureRule:
    """When words that read finished read *surely* finished: their log P(end of turn) plus ``sound_weight`` x the
    turn model's log-odds plus ``confidence_weight`` x (the recognizer's confidence - CONFIDENCE_PIVOT) at or above
    ``sure_from``. Whisper completes a phrase cut mid-way into a plausible sentence ("From fairest creatures we |"
    heard "From fairest creatures we deserve it.") that the brain reads as finished; its confidence in such words is
    lower than in a whole sentence, and the turn model's hearing adds what the sound says
    (docs/conversation.md#the-words-judgement). Both weights 0: the log P alone."""

    sure_from: float
    sound_weight: float = 0.0
    confidence_weight: float = 0.0
    # The turn model's log-odds are counted from this floor up: its far "unfinished" tail is not knowledge (it heard
    # the end of the fleet's long, whole lines at p 0.014-0.03 in sessions that keep their history).
    sound_floor: float = -SOUND_LOGODDS_MAX

    def score(self, logprob: float, signs: TurnSigns) -> float:
        score = logprob
        if signs.sound is not None and self.sound_weight:
            p = min(max(signs.sound, 1e-3), 1 - 1e-3)
            score += self.sound_weight * max(self.sound_floor, math.log(p / (1 - p)))
        if signs.confidence is not None and self.confidence_weight:
            score += self.confidence_weight * (signs.confidence - CONFIDENCE_PIVOT)
        return score


class WordsJudge:
    """The reading of one candidate's words at a time. ``score(text)`` is the brain's log P(end of turn | text), or
    None when it cannot say; ``on_done`` runs (on the event loop) once the verdict is in."""

    def __init__(
        self,
        score: Callable[[str], Awaitable[float | None]],
        threshold: float,
        labels: tuple[str, str],
        on_done: Callable[[], None],
        sure: SureRule | None = None,
    ):
        self._score = score
        self.threshold = threshold
        self.sure = sure  # None: words that read finished are sure
        self._labels = labels
        self._on_done = on_done
        self._task: asyncio.Task | None = None
        self.text = ""
        self.started_ms = 0  # stream ms when the judgement of ``text`` began
        self.logprob: float | None = None
        self.signs = TurnSigns()  # what else is known of the candidate (``start``, ``learn``)

    @property
    def unfinished(self) -> bool:
        """The words read unfinished (the verdict of ``text``)."""
        return self.logprob is not None and self.logprob < self.threshold

    @property
    def doubtful(self) -> bool:
        """The words read finished, but not surely (``SureRule``, with the signs known now)."""
        if self.logprob is None or self.unfinished or self.sure is None:
            return False
        return self.sure.score(self.logprob, self.signs) < self.sure.sure_from

    @property
    def verdict(self) -> str:
        if self.logprob is None:
            return "unknown"
        return "unfinished" if self.unfinished else "doubtful" if self.doubtful else "finished"

    @property
    def pending(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, text: str, now_ms: int, signs: TurnSigns | None = None) -> None:
        """Judge ``text`` (the candidate's words) from ``now_ms`` of the stream on; the verdict so far is dropped."""
        self.cancel()
        self.text, self.logprob, self.signs = text, None, signs or TurnSigns()
        self.started_ms = now_ms
        self._task = asyncio.create_task(self._judge(text), name="dialogue-words-judgement")

    def learn(self, signs: TurnSigns) -> None:
        """More is known of the candidate (a candidate started on a pause's words gets its final's confidence)."""
        before = self.verdict
        self.signs = signs
        if self.logprob is not None and self.verdict != before:
            log.info("words %r: with confidence %s -> %s", self.text, signs.confidence, self.verdict)

    async def settled(self, timeout_s: float) -> None:
        """Wait for the verdict under way, at most ``timeout_s`` (the judgement goes on after that)."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=timeout_s)

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    def too_late(self) -> None:
        """The commit went on without the verdict under way (JUDGEMENT_WAIT_MS passed): counted and logged, so a
        brain too slow to judge shows."""
        if self.pending:
            metrics.STS_WORDS_JUDGEMENTS.labels(*self._labels, "late").inc()
            log.info("the brain's reading of %r came too late: the turn commits without it", self.text)
        self.cancel()

    async def _judge(self, text: str) -> None:
        try:
            logprob = await self._score(text)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a turn signal, not the turn: the commit goes on without it
            log.info("the brain's reading of %r failed (the turn goes on without it): %s", text, e)
            logprob = None
        self.logprob = logprob
        verdict = self.verdict
        metrics.STS_WORDS_JUDGEMENTS.labels(*self._labels, verdict).inc()
        if logprob is not None:
            log.info(
                "words %r: log P(end of turn) %.2f, turn model %s, confidence %s, score %s -> %s",
                text,
                logprob,
                self.signs.sound,
                self.signs.confidence,
                "-" if self.sure is None else f"{self.sure.score(logprob, self.signs):.2f}",
                verdict,
            )
        self._task = None  # the verdict is in (``pending`` is False for the check below)
        try:
            self._on_done()
        except Exception:  # noqa: BLE001 - the dialogue's own check; logged, the next audio checks again
            log.exception("checking the commit after the words judgement failed")
