"""Speech over the agent (while it thinks or speaks): does it take the turn (barge-in) or not?

Duration alone cannot tell "stop" from "mm-hm", so words decide (barge_in.py's ``WordRule``): a stop word interrupts
at once, wherever it is heard first (an interim, the recognizer's early spot, or the utterance's final); enough words
that are not backchannels interrupt once the speech has lasted ``barge_in.min_speech_ms``; a backchannel never does.
Speech whose words are not heard (a hum, words the recognizer misses) interrupts once it has sounded
``barge_in_unheard_ms`` without a pause. Words the reply itself just said are its echo (echo.py ``is_own_words``) and
never interrupt. Speech that ends without interrupting is judged once more by its final (only a stop word there
still interrupts). This part decides; the session acts (cancels the reply, makes that speech the next turn)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from services.common import metrics
from services.common.engines import LISTENING, BargeIn, Hypothesis, SpottedPhrase
from services.conversation.barge_in import WordRule, words
from services.conversation.dialogue.caller_sound import CallerSound
from services.conversation.dialogue.heard import heard_text
from services.conversation.dialogue.reply import Reply
from services.conversation.echo import is_own_words

log = logging.getLogger("voicefleet.conversation.dialogue")

OwnWords = Callable[[str], bool]


def reply_echo(reply: Reply | None, transcript: str, labels: tuple[str, str]) -> bool:
    """Speech over the reply whose words are the reply's own just sent: the agent hearing itself."""
    if reply is None:
        return False
    if is_own_words(transcript, heard_text(reply.text, reply.pieces) or reply.text):
        metrics.STS_BARGE_IN_REFUSED.labels(*labels, "own_words").inc()
        log.info("speech over the reply %r is the reply's own words (echo): no barge-in", transcript)
        return True
    return False


class Overlap:
    """The utterances of one recognizer stream spoken over the agent, and the verdict on each."""

    def __init__(self, barge_in: BargeIn, unheard_ms: int, labels: tuple[str, str]):
        self.enabled = barge_in.enabled
        self.min_speech_ms = barge_in.min_speech_ms
        self.unheard_ms = unheard_ms
        self.rule = WordRule(barge_in.stop_words, barge_in.backchannels, barge_in.min_words)
        self._labels = labels
        self.ignored: set[int] = set()  # utterances spoken over the agent that did not interrupt it
        self.start_ms: int | None = None  # speech that started while the agent thought or spoke
        self.utt: int | None = None
        self.barged_utt: int | None = None  # the utterance that interrupted the reply (the next turn's)
        self.words: list[str] = []  # the last interim's words of speech over the reply
        self.finals: dict[int, int | None] = {}  # ended over the reply, judged by its final: utt -> start

    def new_stream(self) -> None:
        """A new recognizer stream: utterance indexes start again."""
        self.ignored.clear()
        self.finals.clear()
        self.start_ms = self.utt = self.barged_utt = None

    def began(self, utt: int, start_ms: int) -> None:
        """Speech started while the agent thinks or speaks."""
        self.start_ms, self.utt = start_ms, utt
        self.words = []
        if not self.enabled:
            self.ignored.add(utt)

    def ended(self) -> None:
        """Speech over the agent ended without interrupting it (yet): its final decides (a stop word, or enough
        words, still interrupts; a backchannel is dropped)."""
        if self.utt is not None:
            self.finals[self.utt] = self.start_ms
            self.start_ms = self.utt = None

    def judge_final(self, r: Hypothesis, turn: int, state: str, own_words: OwnWords) -> tuple[str, int | None] | None:
        """The final of speech that ended over the agent without interrupting: None drops it (a backchannel, a short
        remark, the reply's echo); else (why, where that speech started): a stop word still interrupts."""
        start = self.finals.pop(r.utterance_index)
        verdict = self.rule.judge(r.transcript)
        log.info(
            "speech over the reply (utterance %d, turn %d, %s): final %r -> %s",
            r.utterance_index,
            turn,
            state,
            r.transcript,
            verdict.why,
        )
        if verdict.interrupt and state != LISTENING and own_words(r.transcript):
            return None  # the agent's own voice heard back
        # Speech that ended without interrupting: only a stop word in its final still does. Whisper writes words
        # into a hum ("And then we chant." for "mm-hm"), so word counts are read on interims only.
        if not (verdict.why == "stop_word" and self.enabled):
            if verdict.why != "empty":
                refused = "backchannel" if verdict.why == "backchannel" else "short_speech"
                metrics.STS_BARGE_IN_REFUSED.labels(*self._labels, refused).inc()
            return None  # a backchannel (or a short remark) over the reply: not the user's turn
        return verdict.why, start

    def judge_interim(self, r: Hypothesis, fed_ms: int, speech_active: bool, own_words: OwnWords) -> str | None:
        """Words of speech over the reply: a stop word, or enough words that are not backchannels, interrupt at
        once. Returns why it interrupts, or None."""
        if not self.enabled or not speech_active or self.start_ms is None:
            return None
        verdict = self.rule.judge(r.transcript)
        if verdict.interrupt and own_words(r.transcript):
            return None
        if verdict.why == "words":
            # Pass 1 (pocketsphinx) guesses wildly at a hum ("and i'm home" for "mm-hm"): count only the words two
            # interims in a row agree on.
            heard = words(r.transcript)
            prev, self.words = self.words, heard
            stable = []
            for a, b in zip(prev, heard, strict=False):
                if a != b:
                    break
                stable.append(a)
            verdict = self.rule.judge(" ".join(stable))
        if not verdict.interrupt:
            return None
        if verdict.why != "stop_word" and fed_ms - self.start_ms < self.min_speech_ms:
            return None  # words, but shorter than barge_in.min_speech_ms: wait (a stop word never waits)
        return verdict.why

    def spotted(self, s: SpottedPhrase, own_words: OwnWords) -> bool:
        """The recognizer heard a stop word early in speech over the reply: whether it interrupts (speech that started
        while the agent listened is a turn of its own; the reply's own words are echo)."""
        utt = s.utterance_index
        if utt == self.utt and self.start_ms is not None:
            start = self.start_ms
        elif utt in self.finals:
            start = self.finals[utt]  # it ended already; its final is on its way
        else:
            return False
        # Whisper on a young utterance padded with silence often repeats a short word ("Stop. Stop. Stop." for one
        # "Stop."): the echo rule compares what was said once.
        heard = words(s.transcript or s.phrase)
        said_once = " ".join(w for i, w in enumerate(heard) if not i or w != heard[i - 1])
        if own_words(said_once or s.phrase):
            return False  # the agent's own voice heard back
        self.finals.pop(utt, None)
        self.start_ms, self.utt = start, utt
        return True

    def long_speech(self, now_ms: int, sound: CallerSound, speech_active: bool, state: str) -> bool:
        """Speech over the agent that has sounded long enough to interrupt whatever was heard of it."""
        if state == LISTENING or self.start_ms is None or not self.enabled or not speech_active:
            return False
        # Words decide (``judge_interim``); speech that goes on this long interrupts whatever was heard (no
        # backchannel is that long; pass-1 interims can miss a word).
        # Sound without a silence in it, not an utterance held open in silence: a backchannel, a pause, then a
        # stop word is not one long speech (a recognizer running behind keeps the backchannel's utterance open).
        lasted = sound.run_length_ms(self.start_ms)
        return sound.sounding(now_ms) and lasted >= max(self.unheard_ms, self.min_speech_ms)

    def barged(self) -> tuple[int | None, int | None]:
        """The speech over the agent interrupted it: returns (its start, its utterance), which belongs to the next
        turn from now on."""
        start, utt = self.start_ms, self.utt
        self.start_ms = self.utt = None
        self.barged_utt = utt
        return start, utt

    def reply_over(self) -> tuple[int | None, int | None]:
        """The reply's turn is complete: speech over it that goes on is the next user turn; returns (start, utt)."""
        start, utt = self.start_ms, self.utt
        self.start_ms = self.utt = None
        return start, utt
