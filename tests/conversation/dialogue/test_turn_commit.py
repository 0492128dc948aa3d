"""TurnCommit: when a candidate end of turn commits, waits or is discarded (services/conversation/dialogue/
turn_commit.py): the commit time, the recognizer's lag, the words judgement's hold, sound after the speech ended,
and a candidate started on a pause's words."""

from __future__ import annotations

from services.common.endpointing import Endpointing
from services.conversation.dialogue.caller_sound import RESUME_QUIET_MS, CallerSound
from services.conversation.dialogue.reply import Reply, UserTurn
from services.conversation.dialogue.turn_commit import COMMIT, DISCARD, TurnCommit
from services.conversation.turn_words import JUDGEMENT_WAIT_MS

ENDPOINTING = Endpointing()


class Reading:
    """The words judgement as the commit reads it (turn_words.WordsJudge's surface)."""

    def __init__(self):
        self.text, self.started_ms, self.pending, self.unfinished, self.doubtful = "", 0, False, False, False

    def start(self, text, now_ms, signs=None):
        self.text, self.started_ms, self.pending, self.unfinished, self.doubtful = text, now_ms, True, False, False


def held(commit: TurnCommit, text: str, commit_at_ms: int | None, now_ms: int = 0) -> Reply:
    reply = Reply(UserTurn(0, text, None, 1.0, 1.1), held=True)
    commit.hold(reply, commit_at_ms, now_ms)
    return reply


def quiet() -> CallerSound:
    sound = CallerSound()
    sound.last_loud_ms = 1000  # the user's speech ended at 1000
    return sound


def verdict(commit, now_ms, sound=None, speech_active=False, behind=False, speech_end=1000):
    return commit.verdict(now_ms, speech_active, speech_end, sound or quiet(), lambda: behind)


def test_the_commit_comes_turn_commit_ms_after_the_speech_ended():
    commit = TurnCommit(250, ENDPOINTING, None)
    assert commit.commit_time(1000, fed_ms=1400) == 1250
    assert commit.commit_time(None, fed_ms=1400) == 1650  # no speech end seen: from now
    reply = held(commit, "Hello there.", 1250)
    assert reply.turn.preemptive and commit.candidate is reply
    assert verdict(commit, 1240) is None
    assert verdict(commit, 1250) == COMMIT
    assert verdict(commit, 1250, speech_active=True) is None
    assert commit.take() is reply and commit.candidate is None and verdict(commit, 2000) is None


def test_the_commit_waits_while_the_recognizer_has_not_heard_the_last_sound():
    commit = TurnCommit(250, ENDPOINTING, None)
    held(commit, "Hello.", 1250)
    assert verdict(commit, 1300, behind=True) is None
    assert verdict(commit, 1300, behind=False) == COMMIT


def test_sound_after_the_speech_end_holds_the_commit_until_the_recognizer_could_call_it_speech():
    commit = TurnCommit(250, ENDPOINTING, None)
    held(commit, "Hello.", 1250)
    sound = quiet()
    sound.last_loud_ms = 1200  # sounding again after the speech ended at 1000
    assert verdict(commit, 1250, sound) is None
    assert verdict(commit, 1200 + RESUME_QUIET_MS, sound) == COMMIT  # the sound stopped
    sound.last_loud_ms = 1250 + ENDPOINTING.min_speech_ms + RESUME_QUIET_MS - 10
    limit = 1250 + ENDPOINTING.min_speech_ms + RESUME_QUIET_MS
    assert verdict(commit, limit - 1, sound) is None
    assert verdict(commit, limit, sound) == COMMIT  # never longer than that


def test_the_words_reading_holds_the_commit_at_most_judgement_wait_ms():
    reading = Reading()
    commit = TurnCommit(250, ENDPOINTING, reading)
    held(commit, "I would like", 1250, now_ms=1100)
    assert reading.text == "I would like" and reading.started_ms == 1100
    assert verdict(commit, 1250 + JUDGEMENT_WAIT_MS - 1) is None
    assert verdict(commit, 1250 + JUDGEMENT_WAIT_MS) == COMMIT


def test_words_read_unfinished_wait_up_to_max_silence_after_the_speech_end():
    reading = Reading()
    commit = TurnCommit(250, ENDPOINTING, reading)
    held(commit, "I would like", 1250)
    reading.pending, reading.unfinished = False, True
    assert verdict(commit, 1000 + ENDPOINTING.max_silence_ms - 1) is None
    assert verdict(commit, 1000 + ENDPOINTING.max_silence_ms) == COMMIT
    reading.unfinished = False
    assert verdict(commit, 1250) == COMMIT
    reading.text, reading.unfinished = "other words", True  # a reading of other words holds nothing
    assert verdict(commit, 1250) == COMMIT


def test_words_read_doubtful_wait_up_to_doubt_ms_and_never_past_max_silence():
    reading = Reading()
    commit = TurnCommit(250, ENDPOINTING, reading, doubt_ms=1000)
    held(commit, "the train to the coast", 1250)
    reading.pending, reading.doubtful = False, True
    assert verdict(commit, 1000 + 1000 - 1) is None  # an 800 ms thinking pause keeps the turn
    assert verdict(commit, 1000 + 1000) == COMMIT
    longer = TurnCommit(250, ENDPOINTING, reading, doubt_ms=ENDPOINTING.max_silence_ms + 5000)
    held(longer, "the train to the coast", 1250)
    assert verdict(longer, 1000 + ENDPOINTING.max_silence_ms) == COMMIT


def test_a_candidate_on_a_pauses_words_awaits_its_final_and_sound_in_the_pause_drops_it():
    commit = TurnCommit(250, ENDPOINTING, None)
    commit.candidate_on_words(900)
    held(commit, "I want a pizza.", None)
    assert commit.awaiting_final
    sound = quiet()
    sound.last_loud_ms = 900
    assert verdict(commit, 5000, sound) is None  # no commit time yet: waits for the final
    sound.last_loud_ms = 900 + 65
    assert verdict(commit, 5000, sound) == DISCARD


def test_sound_that_comes_back_as_a_words_hold_ends_waits_for_the_recognizer_from_where_it_began():
    """A 1200 ms thinking pause held by doubtful words (1400 ms): the caller goes on at 2200, 200 ms before the hold
    ends, and the recognizer calls it speech only after min_speech_ms of it: the commit waits for that, counted from
    where the sound began, not from the commit time long past."""
    reading = Reading()
    commit = TurnCommit(250, ENDPOINTING, reading, doubt_ms=1400)
    held(commit, "the train to the coast", 1250)
    reading.pending, reading.doubtful = False, True
    sound = quiet()
    sound.track(bytes(3200), 2200)  # silence in the pause
    sound.track(b"\x00\x40" * 3200, 2400)  # loud from 2200 to 2400
    assert abs(sound.sound_since_ms - 2200) <= 1  # (to the ms its level windows fall on)
    limit = sound.sound_since_ms + ENDPOINTING.min_speech_ms + RESUME_QUIET_MS
    assert verdict(commit, 2400, sound) is None  # the hold is over; the sound is not yet called speech or not
    sound.track(b"\x00\x40" * 320, limit - 10)
    assert verdict(commit, limit - 1, sound) is None
    assert verdict(commit, limit, sound) == COMMIT  # never longer than that: it was not speech
