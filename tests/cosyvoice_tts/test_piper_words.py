"""Where piper's words end in its audio (services/engines/piper_words.py): paired with the written words by the
voice's own phoneme alignment, and checked by ear: audio cut where a word ends says the text up to that word."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from services.common.config.base import ChunkingConfig
from services.common.engines import SynthesisOptions
from services.engines.piper_engine import PiperTtsEngine
from services.engines.piper_words import word_ends
from tests.speech import INTELLIGIBLE, listen, wer


@dataclass
class Phoneme:
    phoneme: str
    num_samples: int


@dataclass
class Chunk:
    """Stands in for piper's AudioChunk: its phoneme alignments and its audio's length."""

    phoneme_alignments: list[Phoneme] | None
    samples: int

    @property
    def audio_int16_bytes(self) -> bytes:
        return bytes(2 * self.samples)


def chunk(*spoken: str, per_phoneme: int = 10) -> Chunk:
    """A sentence of ``spoken`` words, each phoneme ``per_phoneme`` samples (stress marks and punctuation too)."""
    phonemes = [Phoneme("^", per_phoneme)]
    for i, word in enumerate(spoken):
        if i:
            phonemes.append(Phoneme(" ", per_phoneme))
        phonemes += [Phoneme(p, per_phoneme) for p in word]
    phonemes.append(Phoneme("$", per_phoneme))
    return Chunk(phonemes, per_phoneme * len(phonemes))


def test_words_pair_one_to_one_and_end_where_their_sound_ends():
    text = "One day, a cat."
    # ^ wʌn _ deɪ, _ ɐ _ kæt. $ : word ends after 4, 9, 11 and 16 phonemes of 10 samples
    ends = word_ends(text, [chunk("wʌn", "deɪ,", "ɐ", "kæt.")])
    assert ends == ((3, 40), (8, 90), (10, 110), (15, 160))


def test_two_written_words_said_as_one_both_end_where_the_joined_sound_ends():
    text = "She was a cat."
    ends = word_ends(text, [chunk("ʃiː", "wʌzɐ", "kæt.")])
    assert ends == ((3, 40), (7, 90), (9, 90), (14, 140))  # "was" is not heard before "a" is


def test_a_number_said_as_several_words_ends_with_the_last_of_them():
    text = "I have 1,234 apples."
    spoken = ["aɪ", "hæv", "wʌn", "θaʊzənd", "tuːhʌndɹɪd", "θɜːɾi", "fɔːɹ", "æpəlz."]
    ends = dict(word_ends(text, [chunk(*spoken)]))
    last_of_the_number = sum(len(w) + 1 for w in spoken[:7]) * 10  # ^ and the words before "æpəlz" with spaces
    assert ends[len("I have 1,234")] == last_of_the_number


def test_sentences_of_one_segment_follow_each_other_and_no_alignment_gives_none():
    ends = word_ends("Mr. Smith.", [chunk("mɪstɚ."), chunk("smɪθ.")])
    assert ends == ((3, 70), (10, 80 + 60))  # the second sentence starts after the first's 80 samples
    assert word_ends("Mr. Smith.", [chunk("mɪstɚ."), Chunk(None, 100)]) == ()


@pytest.fixture(scope="module")
async def piper():
    engine = PiperTtsEngine("test-words", ChunkingConfig())
    await engine.start()
    yield engine
    await engine.close()


SENTENCE = "She was a very curious cat, and she wandered into the garden at 18 minutes past four."


async def test_audio_cut_where_a_word_ends_says_the_text_up_to_that_word(piper):
    pieces = [p async for p in piper.synthesize(SENTENCE, SynthesisOptions(voice="joe"))]
    pcm, ends = b"", []  # the pieces' audio joined, and their word ends in it
    for piece in pieces:
        ends += [(char, len(pcm) // 2 + sample) for char, sample in piece.word_ends]
        assert all(piece.text_start < char <= piece.text_end for char, _ in piece.word_ends)
        pcm += piece.pcm
    assert [char for char, _ in ends] == [m.end() for m in re.finditer(r"\S+", SENTENCE)]  # every word, in order
    assert [sample for _, sample in ends] == sorted(sample for _, sample in ends)
    for words in (6, 11):  # "... curious cat," and "... into the garden"
        char, sample = ends[words - 1]
        said = SENTENCE[:char]
        heard = listen(pcm[: 2 * sample], pieces[0].sample_rate_hz)
        assert wer(said, heard) <= INTELLIGIBLE, (said, heard)


async def test_streamed_text_places_its_words_in_the_whole_text(piper):
    """A reply streamed word by word (the cascade's path): each segment's word ends are positions in the whole reply,
    not in the segment (they were, and a cut reply then kept only its first sentence)."""
    from services.common.engines import BufferPolicy, TextEvent

    async def deltas():
        for i, word in enumerate(SENTENCE.split(" ")):
            yield TextEvent(text=(" " if i else "") + word)
        yield TextEvent(end=True)

    stream = piper.synthesize_text_stream(deltas(), SynthesisOptions(voice="joe"), BufferPolicy(min_chars=20))
    pieces = [p async for p in stream]
    assert len(pieces) > 1
    chars = [char for p in pieces for char, _ in p.word_ends]
    assert chars == [m.end() for m in re.finditer(r"\S+", SENTENCE)]
    assert all(p.text_start < char <= p.text_end for p in pieces for char, _ in p.word_ends)
