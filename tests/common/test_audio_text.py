from __future__ import annotations

import itertools
import wave

import numpy as np
import pytest

from services.common import audio
from services.common.errors import InvalidArgument
from services.common.text import FirstSegment, first_cut, sentence_spans, speech_segments


def tone(freq, rate, seconds=0.5):
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t) * 32767).astype(np.int16).tobytes()


def peak_hz(pcm, rate):
    x = np.frombuffer(pcm, dtype=np.int16).astype(float)
    spectrum = np.abs(np.fft.rfft(x))
    return np.fft.rfftfreq(len(x), 1 / rate)[spectrum.argmax()]


@pytest.mark.parametrize("src,dst", [(22050, 16000), (22050, 48000), (16000, 8000), (24000, 44100)])
def test_resample_keeps_pitch_and_duration(src, dst):
    out = audio.resample(tone(440, src), src, dst)
    assert abs(len(out) / 2 / dst - 0.5) < 0.002
    assert abs(peak_hz(out, dst) - 440) < 3


def test_stream_resampler_matches_whole_buffer():
    pcm = tone(300, 22050, 1.0)
    r = audio.StreamResampler(22050, 16000)
    pieces = [r.feed(pcm[i : i + 3000]) for i in range(0, len(pcm), 3000)] + [r.feed(b"", last=True)]
    streamed = b"".join(pieces)
    whole = audio.resample(pcm, 22050, 16000)
    assert abs(len(streamed) - len(whole)) <= 4
    a = np.frombuffer(streamed[: len(whole)], dtype=np.int16).astype(float)
    b = np.frombuffer(whole[: len(a) * 2], dtype=np.int16).astype(float)
    assert np.corrcoef(a[100:-100], b[100:-100])[0, 1] > 0.999  # no seams


LIVE_RATES = [(24000, 16000), (48000, 16000), (8000, 16000), (44100, 16000)]


def live(resampler, pcm: bytes, src: int, piece_ms: int = 20) -> tuple[bytes, list[int]]:
    """``pcm`` fed in pieces of ``piece_ms``: the output, and after each piece how many output samples are owed (the
    input so far at the output rate, less what came out)."""
    step = src * piece_ms // 1000 * 2
    out, owed = b"", []
    for i in range(0, len(pcm), step):
        out += resampler.feed(pcm[i : i + step])
        owed.append((i + len(pcm[i : i + step])) // 2 * resampler.dst_rate // src - len(out) // 2)
    return out, owed


@pytest.mark.parametrize("src,dst", LIVE_RATES)
def test_the_live_resampler_holds_nothing_back_and_keeps_the_signal(src, dst):
    r = audio.LiveResampler(src, dst)
    out, owed = live(r, tone(440, src, 1.0), src)
    assert max(owed) <= 1, owed  # every piece's samples come out with it (soxr's stream held back 5-118 ms)
    y = np.frombuffer(out, dtype=np.int16).astype(float)
    t = np.arange(len(y)) / dst - r.delay_seconds
    ideal = 0.5 * np.sin(2 * np.pi * 440 * t) * 32767
    error = (y - ideal)[dst // 10 :]  # past the filter's start
    snr_db = 10 * np.log10(np.mean(ideal[dst // 10 :] ** 2) / np.mean(error**2))
    assert snr_db > 60, snr_db


def test_the_live_resampler_is_seamless_whatever_the_pieces():
    pcm = tone(300, 24000, 1.0)
    whole = audio.LiveResampler(24000, 16000).feed(pcm)
    uneven = audio.LiveResampler(24000, 16000)
    cuts = [0, 2, 962, 962, 5000, 17002, len(pcm)]  # bytes, whole samples: a single sample, an empty piece
    assert b"".join(uneven.feed(pcm[a:b]) for a, b in itertools.pairwise(cuts)) == whole


@pytest.mark.parametrize("src,freq", [(24000, 9000), (24000, 11000), (48000, 12000), (44100, 20000)])
def test_the_live_resampler_keeps_out_what_the_output_rate_cannot_hold(src, freq):
    """A tone above 8 kHz cannot be carried at 16 kHz: what comes out of it (its alias) is 50 dB down or more."""
    y = np.frombuffer(audio.LiveResampler(src, 16000).feed(tone(freq, src, 1.0)), dtype=np.int16).astype(float)
    level_db = 20 * np.log10(np.sqrt(np.mean(y[1600:] ** 2)) / (0.5 * 32767 / np.sqrt(2)) + 1e-12)
    assert level_db < -50, level_db


def test_wav_round_trip(tmp_path):
    pcm = tone(1000, 16000)
    audio.write_wav(tmp_path / "t.wav", pcm, 16000)
    assert audio.read_wav(str(tmp_path / "t.wav")) == (pcm, 16000)


def test_split_pcm_keeps_samples_whole():
    parts = list(audio.split_pcm(bytes(range(10)) * 10, 33))
    assert all(len(p) % 2 == 0 for p in parts) and b"".join(parts) == bytes(range(10)) * 10


def test_formats():
    assert audio.output_format("f", None, 22050).sample_rate_hz == 22050
    with pytest.raises(InvalidArgument, match="f.sample_rate_hz: 7999 Hz"):
        audio.check_rate("f.sample_rate_hz", 7999)
    with pytest.raises(InvalidArgument, match="not a whole number of 16-bit samples"):
        audio.check_pcm("audio", b"abc")


def test_sentences_and_first_clause():
    text = "Hello world. This is a test! Is it? Yes"
    assert [text[a:b] for a, b in sentence_spans(text)] == ["Hello world.", "This is a test!", "Is it?", "Yes"]
    long_first = "When the long first sentence goes on, and on, the first audio should not wait for all of it. Next."
    segs = [long_first[a:b] for a, b in speech_segments(long_first, FirstSegment(max_chars=60, min_chars=12))]
    assert segs[0] == "When the long first sentence goes on,"
    assert segs[1:] == ["and on, the first audio should not wait for all of it.", "Next."]
    assert [long_first[a:b] for a, b in speech_segments(long_first, FirstSegment(max_chars=0))][0].endswith("of it.")
    assert [long_first[a:b] for a, b in speech_segments(long_first, None)][0].endswith("all of it.")
    chinese = "你好。今天好吗？"
    assert [chinese[a:b] for a, b in sentence_spans(chinese)] == ["你好。", "今天好吗？"]


def spoken(text, first):
    return [text[a:b] for a, b in speech_segments(text, first)]


def test_a_long_first_sentence_without_a_comma_is_cut_after_a_few_words():
    """Issue 23: a 70-character first sentence with no clause mark no longer waits to be synthesized whole."""
    text = "The weather service expects heavy rain over the northern hills tonight. Stay safe."
    assert len(text.split(".")[0]) == 70
    assert spoken(text, FirstSegment(words=5)) == [
        "The weather service expects heavy",
        "rain over the northern hills tonight.",
        "Stay safe.",
    ]
    assert spoken(text, FirstSegment(words=3))[0] == "The weather service"
    # words 0: clause marks only, as before: no mark, no cut
    assert (
        spoken(text, FirstSegment(words=0))[0]
        == "The weather service expects heavy rain over the northern hills tonight."
    )
    # later sentences are never cut, however long
    two = "Fine. " + text
    assert spoken(two, FirstSegment())[1] == "The weather service expects heavy rain over the northern hills tonight."


def test_the_first_cut_keeps_short_sentences_whole_and_never_leaves_a_stub():
    short = "The capital of France is Paris. It is lovely."
    assert spoken(short, FirstSegment()) == ["The capital of France is Paris.", "It is lovely."]
    # the cut is at a word boundary and leaves at least min_chars after it in the sentence
    text = "Supercalifragilisticexpialidocious antidisestablishmentarianism floccinaucinihilipilification is ok."
    for a, b in speech_segments(text, FirstSegment(words=1)):
        assert text[a:b].split() and (a == 0 or text[a - 1] == " ")
    assert first_cut("one two three four five six", 0, 27, FirstSegment(words=5, min_chars=4), complete=True) is None


def test_cjk_first_sentence_is_cut_at_a_clause_mark_or_after_n_characters():
    no_mark = "今天天气很好我们一起去公园散步吧然后去吃饭好不好呢朋友们大家一起来吧。下一句。"
    assert spoken(no_mark, FirstSegment(cjk_chars=10)) == [
        "今天天气很好我们一起",
        "去公园散步吧然后去吃饭好不好呢朋友们大家一起来吧。",
        "下一句。",
    ]
    marked = "今天天气很好我们一起去公园散步吧，然后去吃饭好不好呢朋友们大家一起来吧。"
    assert spoken(marked, FirstSegment(min_chars=12))[0] == "今天天气很好我们一起去公园散步吧，"
    assert spoken("你好。今天好吗？", FirstSegment()) == ["你好。", "今天好吗？"]  # short: whole


def extensible_wav(pcm: bytes, rate: int, channels: int, subformat: bytes) -> bytes:
    """A RIFF/WAVE file with a WAVE_FORMAT_EXTENSIBLE fmt chunk (tag 65534), as phones and many recorders write."""
    fmt = (
        (65534).to_bytes(2, "little")
        + channels.to_bytes(2, "little")
        + rate.to_bytes(4, "little")
        + (rate * channels * 2).to_bytes(4, "little")
        + (channels * 2).to_bytes(2, "little")
        + (16).to_bytes(2, "little")
        + (22).to_bytes(2, "little")  # cbSize
        + (16).to_bytes(2, "little")  # valid bits
        + (3 if channels == 2 else 4).to_bytes(4, "little")  # channel mask
        + subformat
    )
    chunks = b"fmt " + len(fmt).to_bytes(4, "little") + fmt + b"data" + len(pcm).to_bytes(4, "little") + pcm
    return b"RIFF" + (4 + len(chunks)).to_bytes(4, "little") + b"WAVE" + chunks


def test_read_wav_takes_the_extensible_header_of_16_bit_pcm_and_refuses_other_subformats(tmp_path):
    pcm_guid = bytes.fromhex("0100000000001000800000aa00389b71")
    mono = (np.arange(1600, dtype=np.int16) * 7).tobytes()
    path = tmp_path / "phone.wav"
    path.write_bytes(extensible_wav(mono, 16000, 1, pcm_guid))
    assert audio.read_wav(str(path)) == (mono, 16000)
    stereo = np.stack([np.full(800, 100, np.int16), np.full(800, 300, np.int16)], axis=1).tobytes()
    assert audio.read_wav(extensible_wav(stereo, 8000, 2, pcm_guid)) == (np.full(800, 200, np.int16).tobytes(), 8000)
    float_guid = bytes.fromhex("0300000000001000800000aa00389b71")  # IEEE float: not 16-bit PCM
    with pytest.raises(wave.Error, match="subformat"):
        audio.read_wav(extensible_wav(mono, 16000, 1, float_guid))
