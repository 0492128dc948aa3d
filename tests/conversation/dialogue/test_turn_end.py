"""turn_end: how a reply's turn ends (failed, interrupted, complete) and what of the reply the context keeps
(services/conversation/dialogue/turn_end.py)."""

from __future__ import annotations

from services.common.engines import INTERRUPTED, TURN_COMPLETE, TURN_ERROR
from services.common.errors import Unavailable
from services.conversation.dialogue.heard import SentPiece
from services.conversation.dialogue.reply import Reply, UserTurn
from services.conversation.dialogue.turn_end import turn_end

TEXT = "One two three four. Five six seven eight."


def reply(sent_of_second_ms: int) -> Reply:
    """Two pieces of 2 s each (at 1000 samples a second: a sample is a millisecond), the first sent whole."""
    r = Reply(UserTurn(2, "Count.", None, None, 0.0), text=TEXT + " ")
    r.pieces = [SentPiece(0, 19, 2000, 2000, rate=1000), SentPiece(19, len(TEXT), 2000, sent_of_second_ms, rate=1000)]
    r.sent_s = (2000 + sent_of_second_ms) / 1000
    return r


def test_a_complete_reply_keeps_its_whole_text():
    end = turn_end(reply(0), None)  # audio still queued goes out before TURN_COMPLETE: the text is whole
    assert (end.heard, end.failed) == (TEXT, False)
    [(event, extra)] = end.events
    assert event.kind == TURN_COMPLETE and event.turn_index == 2 and extra[1:] == (TEXT, False)


def test_an_interrupted_reply_keeps_what_was_heard_and_says_so():
    r = reply(1300)  # half the second piece's sound, and a word's worth (heard.CUT_WORD_MARGIN_MS) past it
    r.interrupted_reason, r.interrupted_wall, r.last_audio_wall = "barge_in", 10.0, 10.12
    end = turn_end(r, None)
    assert end.heard == "One two three four. Five six" and not end.failed
    (cut, _), (done, extra) = end.events
    assert cut.kind == INTERRUPTED and cut.reason == "barge_in" and cut.heard_text == end.heard
    assert cut.audio_sent_ms == 3300 and abs(cut.silence_after_s - 0.12) < 1e-9
    assert done.kind == TURN_COMPLETE and extra[1:] == (end.heard, True)
    r.last_audio_wall = 9.0  # no audio after the cut
    assert turn_end(r, None).events[0][0].silence_after_s == 0.0


def test_an_error_of_an_interrupted_reply_is_its_interruption():
    r = reply(1300)
    r.interrupted_reason = "client"
    end = turn_end(r, RuntimeError("cancelled mid-step"))
    assert [e.kind for e, _ in end.events] == [INTERRUPTED, TURN_COMPLETE]


def test_a_failed_reply_ends_in_turn_error_and_keeps_what_was_heard():
    end = turn_end(reply(2000), Unavailable("brain down"))
    assert end.failed and end.heard == TEXT
    [(event, extra)] = end.events
    assert (event.kind, event.code, event.message, extra) == (TURN_ERROR, 14, "brain down", None)
    end = turn_end(reply(0), RuntimeError("boom"))
    [(event, _)] = end.events
    assert (event.code, event.message, end.heard) == (13, "reply failed: RuntimeError", "One two three four.")


def test_what_was_sent_ahead_of_playback_when_the_reply_was_cut_was_not_heard():
    r = reply(2000)  # both pieces sent whole (4 s), ahead of playback
    r.interrupted_reason = "barge_in"
    r.first_audio_wall, r.interrupted_wall = 6.0, 9.3  # the caller had played 3.3 s of it at the cut
    assert turn_end(r, None).heard == "One two three four. Five six"
    r.first_audio_wall = None  # when playback cannot be placed, what was sent counts
    assert turn_end(r, None).heard == TEXT
