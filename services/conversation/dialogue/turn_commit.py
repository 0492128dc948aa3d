"""The turn commit: when a candidate end of the user's turn becomes the end.

A candidate end of turn (the recognizer's final after the user went silent, or a pause whose words read as a finished
sentence: ``candidate_on_words``) starts the reply at once, held (reply.py). The turn *commits* (the held reply's text
and audio go out) once the user has been silent ``turn_commit_ms`` after their speech, unless:

* the recognizer has not yet reported on sound the caller made a moment ago (stream_time.py ``RecognizerPace``);
* the brain's reading of the candidate's words is under way (at most ``JUDGEMENT_WAIT_MS``), or read them unfinished
  (then up to the endpointing's ``max_silence_ms`` after the speech ended), or read them finished but doubtfully
  with the turn model's hearing and the recognizer's confidence (then up to ``moss_sts.brain_turn_doubt_ms``;
  turn_words.py ``WordsJudge``, ``SureRule``);
* the caller is making sound again after their speech ended and the recognizer has not yet said whether it is
  speech (up to ``min_speech_ms`` + RESUME_QUIET_MS past the commit time, or past the start of that sound when it
  began later: after a thinking pause the words judgement held the turn through).

The candidate is *discarded* (the user went on) when speech starts again before the commit, when a candidate started
on a pause's words hears sound in that pause or gets a final with other words. This part keeps the candidate and
decides; the session acts (sends the held reply, or drops it)."""

from __future__ import annotations

from services.common.endpointing import Endpointing
from services.conversation.dialogue.caller_sound import RESUME_QUIET_MS, CallerSound
from services.conversation.dialogue.reply import Reply
from services.conversation.turn_words import JUDGEMENT_WAIT_MS, TurnSigns, WordsJudge

COMMIT, DISCARD = "commit", "discard"


class TurnCommit:
    def __init__(self, turn_commit_ms: int, endpointing: Endpointing, words: WordsJudge | None, doubt_ms: int = 0):
        self.turn_commit_ms = turn_commit_ms
        self.min_speech_ms = endpointing.min_speech_ms
        self.max_silence_ms = endpointing.max_silence_ms
        self.doubt_ms = min(doubt_ms, endpointing.max_silence_ms)  # how long doubtful words wait after the speech
        self.words = words  # the brain's reading of a candidate's words (None: no words judgement)
        self.candidate: Reply | None = None  # the held reply to the candidate end of turn
        self.commit_at_ms: int | None = None
        # Where the speech of a candidate started on a pause's words ended (``candidate_on_words``): sound after it
        # drops that candidate.
        self.speech_end_ms = 0
        self.discarded = 0  # candidates of the turn being heard that were dropped (the user went on)

    def commit_time(self, last_speech_end_ms: int | None, fed_ms: int) -> int:
        """The stream ms at which a turn whose speech ended at ``last_speech_end_ms`` (None: now) commits."""
        return (last_speech_end_ms or fed_ms) + self.turn_commit_ms

    def hold(self, reply: Reply, commit_at_ms: int | None, fed_ms: int, signs: TurnSigns | None = None) -> None:
        """``reply`` answers a candidate end of turn, held until the commit at ``commit_at_ms`` (None: once the
        recognizer's final says the turn is over, ``awaiting_final``); the words judgement starts on its words,
        weighed with ``signs``."""
        reply.turn.preemptive = True
        self.commit_at_ms = commit_at_ms
        self.candidate = reply
        if self.words is not None:
            self.words.start(reply.turn.text, fed_ms, signs)  # first: the brain reads the words, then replies

    def candidate_on_words(self, speech_end_ms: int) -> None:
        """The candidate about to be held was started on a pause's words, whose speech ended at ``speech_end_ms``."""
        self.speech_end_ms = speech_end_ms

    @property
    def awaiting_final(self) -> bool:
        """A held reply started on a pause's words: it has no commit time until the recognizer's final for that
        pause comes."""
        return self.candidate is not None and self.commit_at_ms is None

    def take(self) -> Reply | None:
        """The candidate, no longer one (committed or dropped)."""
        reply, self.candidate, self.commit_at_ms = self.candidate, None, None
        return reply

    def verdict(
        self, now_ms: int, speech_active: bool, last_speech_end_ms: int | None, sound: CallerSound, behind
    ) -> str | None:
        """At ``now_ms`` of the stream: COMMIT, DISCARD or None (wait). ``behind()``: the recognizer has not yet
        reported on the caller's last sound."""
        if self.awaiting_final:
            if sound.loud_after(self.speech_end_ms):
                return DISCARD  # sound again in the pause: the user may be going on
            return None
        if self.candidate is None or speech_active or self.commit_at_ms is None or now_ms < self.commit_at_ms:
            return None
        if behind():
            return None  # it may be the user going on
        if self.words_hold(now_ms):
            return None
        if sound.loud_after(last_speech_end_ms or 0) and sound.sounding(now_ms):
            # Sound after the speech ended, a moment ago: wait for the recognizer to say whether it is speech (it
            # does once min_speech_ms of it has passed), counted from the commit time or from where this run of
            # sound began, if later: a words hold can outlast a thinking pause by less than min_speech_ms.
            resumed_ms = max(self.commit_at_ms, min(sound.sound_since_ms, now_ms))
            if now_ms < resumed_ms + self.min_speech_ms + RESUME_QUIET_MS:
                return None
        return COMMIT

    def words_hold(self, now_ms: int) -> bool:
        """The commit waits for the brain's reading of the candidate's words (at most JUDGEMENT_WAIT_MS past the
        commit time or the reading's start, whichever is later), words that read unfinished wait for more speech
        up to max_silence_ms after the speech ended (the commit time less turn_commit_ms), doubtful ones up to
        doubt_ms."""
        if self.words is None or self.words.text != self.candidate.turn.text:
            return False
        if self.words.pending:
            return now_ms < max(self.commit_at_ms, self.words.started_ms) + JUDGEMENT_WAIT_MS
        speech_end = self.commit_at_ms - self.turn_commit_ms
        if self.words.unfinished:
            return now_ms < speech_end + self.max_silence_ms
        return self.words.doubtful and now_ms < speech_end + self.doubt_ms
