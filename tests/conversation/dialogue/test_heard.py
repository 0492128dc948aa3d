"""heard_text: the text whose audio the caller got, piece by piece, pro rata by voiced audio, cut back to a word
(services/conversation/dialogue/heard.py)."""

from __future__ import annotations

from services.conversation.dialogue.heard import CUT_WORD_MARGIN_MS, SentPiece, heard_text, voiced_span
from tests.conversation.dialogue.kit import silence, tone

TEXT = "One two three four. Five six seven eight."
FIRST, SECOND = (0, 19), (19, len(TEXT))


def test_whole_pieces_count_whole_and_unsent_ones_not_at_all():
    pieces = [SentPiece(*FIRST, total_samples=100, sent_samples=100), SentPiece(*SECOND, total_samples=100)]
    assert heard_text(TEXT, pieces) == "One two three four."
    pieces[1].sent_samples = 100
    assert heard_text(TEXT, pieces) == TEXT


def test_a_partly_sent_piece_counts_pro_rata_less_a_word_before_the_cut_back_to_a_word_boundary():
    # rate 1000: a sample is a millisecond; the second piece is 2 s of sound
    pieces = [
        SentPiece(*FIRST, total_samples=2000, sent_samples=2000, rate=1000),
        SentPiece(*SECOND, total_samples=2000, rate=1000),
    ]
    pieces[1].sent_samples = 1000 + CUT_WORD_MARGIN_MS  # half heard -> up to the 30th char, inside "seven"
    assert heard_text(TEXT, pieces) == "One two three four. Five six"
    pieces[1].sent_samples = 1000  # half sent, but its last word's worth may be cut mid-word: "six" is not counted
    assert heard_text(TEXT, pieces) == "One two three four. Five"
    pieces[1].sent_samples = CUT_WORD_MARGIN_MS  # a word's worth: nothing of it
    assert heard_text(TEXT, pieces) == "One two three four."


def test_the_silence_before_a_pieces_first_sound_holds_none_of_its_words():
    pcm = silence(500) + tone(1000)
    start, end = voiced_span(pcm)
    assert abs(start - 8000) <= 512 and 0 <= len(pcm) // 2 - end < 512
    first = SentPiece(*FIRST, total_samples=100, sent_samples=100)
    piece = SentPiece(*SECOND, total_samples=len(pcm) // 2, sent_samples=8000, voiced_start=start, voiced_end=end)
    assert heard_text(TEXT, [first, piece]) == "One two three four."  # the pause went out, no word of it
    piece.sent_samples = start + (end - start) // 2 + 16_000 * CUT_WORD_MARGIN_MS // 1000
    assert heard_text(TEXT, [first, piece]) == "One two three four. Five six"


def test_a_silent_piece_is_voiced_whole_and_an_empty_one_not_at_all():
    assert voiced_span(silence(100)) == (0, 1600)
    assert voiced_span(b"") == (0, 0)
