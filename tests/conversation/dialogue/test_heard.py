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


def test_with_the_voices_word_ends_a_cut_piece_counts_the_words_whose_sound_ended():
    # "Five six seven eight." ends its words at samples 400, 800, 1300 and 1800 of 2000
    ends = tuple(
        (TEXT.index(w) + len(w), s) for w, s in (("Five", 400), ("six", 800), ("seven", 1300), ("eight.", 1800))
    )
    first = SentPiece(*FIRST, total_samples=100, sent_samples=100)
    piece = SentPiece(*SECOND, total_samples=2000, sent_samples=1299, word_ends=ends)
    assert heard_text(TEXT, [first, piece]) == "One two three four. Five six"  # "seven" not yet ended
    piece.sent_samples = 1300
    assert heard_text(TEXT, [first, piece]) == "One two three four. Five six seven"
    piece.sent_samples = 399
    assert heard_text(TEXT, [first, piece]) == "One two three four."


def test_what_the_caller_played_bounds_what_was_sent():
    first = SentPiece(*FIRST, total_samples=1000, sent_samples=1000, rate=1000)
    ends = tuple((TEXT.index(w) + len(w), s) for w, s in (("Five", 200), ("six", 400), ("seven", 700), ("eight.", 900)))
    second = SentPiece(*SECOND, total_samples=1000, sent_samples=800, rate=1000, word_ends=ends)
    assert heard_text(TEXT, [first, second]) == "One two three four. Five six seven"  # all that was sent
    assert heard_text(TEXT, [first, second], played_s=1.5) == "One two three four. Five six"  # 0.5 s of the second
    # 0.9 s of the first piece (no word ends): pro rata, less a word's worth
    assert heard_text(TEXT, [first, second], played_s=0.9) == "One two"
    assert heard_text(TEXT, [first, second], played_s=9.0) == "One two three four. Five six seven"


def test_chunks_of_one_sentence_count_together_not_each_for_the_whole_sentence():
    # a remote voice's sentence comes in 200 ms messages, each with the sentence's span
    first = SentPiece(*FIRST, total_samples=1000, sent_samples=1000, rate=1000)
    chunks = [SentPiece(*SECOND, total_samples=200, sent_samples=200, rate=1000) for _ in range(5)]
    for c in chunks[3:]:
        c.sent_samples = 0
    heard = heard_text(TEXT, [first, *chunks])  # 600 of the sentence's 1000 ms sent: pro rata, less a word
    assert heard == "One two three four. Five"
    for c in chunks:
        c.sent_samples = 200
    assert heard_text(TEXT, [first, *chunks]) == TEXT
