"""StreamingSynthesize: text fed word by word is spoken before it ends, through the router and direct; bad streams
get a status naming the field; a cancelled stream stops the engine. Plus the incremental segmenter itself."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from services.common.engines import BufferPolicy, TextEvent
from services.common.text import FirstSegment, IncrementalSegmenter, speech_segments, stream_segments
from tests.conftest import settled_steps, wait_until
from tests.speech import INTELLIGIBLE, intelligible
from voice.v1 import synthesizer_pb2 as pb

ANSWER = "Sure. The first train leaves at nine in the morning, and the last one at ten at night. Enjoy your trip."


def config(**buffering):
    return pb.StreamingSynthesizeRequest(
        request_id="stream-1",
        config=pb.StreamingSynthesisConfig(buffering=pb.TextBufferPolicy(**buffering)),
    )


def delta(text):
    return pb.StreamingSynthesizeRequest(text_delta=text)


class Feeder:
    """Sends config, then deltas one by one; before the LAST delta it waits (up to 30 s) for the first audio.

    If the server only spoke once all text was in, the wait times out and the first audio comes after the last
    delta: the log then shows it and the ordering assertion fails. No timing is asserted.
    """

    def __init__(self, deltas, tail=None, **buffering):
        self.deltas, self.buffering = deltas, buffering
        self.tail = tail if tail is not None else [pb.StreamingSynthesizeRequest(end_of_text=True)]
        self.log: list[str] = []
        self.first_audio = threading.Event()

    def requests(self):
        yield config(**self.buffering)
        for i, d in enumerate(self.deltas):
            if i == len(self.deltas) - 1:
                self.first_audio.wait(30)
            self.log.append(f"delta {i}")
            yield delta(d)
        yield from self.tail

    def run(self, stub, timeout=60):
        replies = []
        for reply in stub.StreamingSynthesize(self.requests(), timeout=timeout):
            if not replies:
                self.log.append("first audio")
                self.first_audio.set()
            replies.append(reply)
        return replies


def word_deltas(text):
    parts = text.split(" ")
    return [parts[0]] + [" " + w for w in parts[1:]]


@pytest.fixture(params=["router", "cosyvoice_tts"])
def stub(request, router_tts, direct_tts):
    return router_tts if request.param == "router" else direct_tts


def test_first_audio_precedes_the_last_delta(stub):
    feeder = Feeder(word_deltas(ANSWER))
    replies = feeder.run(stub)
    last = f"delta {len(feeder.deltas) - 1}"
    assert feeder.log.index("first audio") < feeder.log.index(last), feeder.log
    assert {r.request_id for r in replies} == {"stream-1"}
    assert {r.served_by for r in replies} == {"cosyvoice_tts/piper"}
    # Chunks are contiguous; spans index the concatenated deltas, in order, up to the end of the text.
    assert [r.audio.sequence for r in replies] == list(range(len(replies)))
    spans = [(r.text_span.start_char, r.text_span.end_char) for r in replies]
    assert spans == sorted(spans) and spans[0][0] == 0 and spans[-1][1] == len(ANSWER)
    assert ANSWER[spans[0][0] : spans[0][1]] == "Sure."
    pcm = b"".join(r.audio.data for r in replies)
    rate = replies[0].audio.format.sample_rate_hz
    error, heard = intelligible(ANSWER, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def test_flush_speaks_an_unfinished_sentence(stub):
    # No punctuation and a 10 s timer: only the flush can make it speak before the last delta.
    feeder = Feeder([])

    def requests():
        yield config(max_wait_ms=10_000)
        yield delta("Hello there")
        yield delta(" my good friend")
        yield pb.StreamingSynthesizeRequest(flush=True)
        feeder.first_audio.wait(30)
        feeder.log.append("last delta")
        yield delta(" and goodbye")
        yield pb.StreamingSynthesizeRequest(end_of_text=True)

    feeder.requests = requests
    replies = feeder.run(stub)
    assert feeder.log.index("first audio") < feeder.log.index("last delta"), feeder.log
    assert (replies[0].text_span.start_char, replies[0].text_span.end_char) == (0, len("Hello there my good friend"))
    assert replies[-1].text_span.end_char == len("Hello there my good friend and goodbye")


def test_max_wait_timer_speaks_buffered_words(stub):
    # No punctuation, no flush: the 300 ms timer speaks the complete words while the "LLM" pauses.
    feeder = Feeder(["Hello there", " my good friend ", "and goodbye"], max_wait_ms=300)
    replies = feeder.run(stub)
    assert feeder.log.index("first audio") < feeder.log.index("delta 2"), feeder.log
    assert replies[0].text_span.end_char == len("Hello there my good friend")


def test_cancel_through_router_stops_the_backend_engine(cpu_fleet, router_tts):
    def backend(code):
        return cpu_fleet.metric(
            "cosyvoice_tts",
            "voicefleet_requests_total",
            service="cosyvoice_tts",
            method="StreamingSynthesize",
            code=code,
        )

    before_steps, before_cancelled = settled_steps(cpu_fleet, "cosyvoice_tts"), backend("CANCELLED")
    text = " ".join(f"This is sentence number {i} of a long streamed answer." for i in range(30))
    requests = iter([config(), *[delta(w) for w in word_deltas(text)], pb.StreamingSynthesizeRequest(end_of_text=True)])
    call = router_tts.StreamingSynthesize(requests, timeout=60)
    next(call)
    call.cancel()
    assert wait_until(lambda: backend("CANCELLED") == before_cancelled + 1), "backend stream was not cancelled"
    assert wait_until(
        lambda: (
            cpu_fleet.metric(
                "cosyvoice_tts", "voicefleet_active_streams", service="cosyvoice_tts", method="StreamingSynthesize"
            )
            == 0
        )
    )
    after = settled_steps(cpu_fleet, "cosyvoice_tts")
    assert after - before_steps <= 3, f"{after - before_steps} engine steps ran for a cancelled stream of 30"


BAD_STREAMS = [
    ("no config", [delta("Hello.")], "config: the first message must carry config"),
    ("nothing at all", [], "config: the stream ended before any message"),
    ("config twice", [config(), config()], "config: was sent twice"),
    (
        "delta after end",
        [config(), delta("Hi there."), pb.StreamingSynthesizeRequest(end_of_text=True), delta("More.")],
        "text_delta: arrived after end_of_text",
    ),
    ("text over the limit", [config(), *[delta("word " * 1000)] * 60], "over the limit of 50000 per stream"),
    (
        "language the voice lacks",
        [
            pb.StreamingSynthesizeRequest(
                config=pb.StreamingSynthesisConfig(synthesis=pb.SynthesisConfig(voice="joe", language="fr"))
            )
        ],
        "config.synthesis.language: voice 'joe' does not speak 'fr'; it speaks en-US; no voice here speaks it",
    ),
    (
        "language no voice speaks",
        [
            pb.StreamingSynthesizeRequest(
                config=pb.StreamingSynthesisConfig(synthesis=pb.SynthesisConfig(language="fr"))
            )
        ],
        "config.synthesis.language: no voice was named and no voice here speaks 'fr'; languages spoken: en",
    ),
    (
        "unknown voice",
        [pb.StreamingSynthesizeRequest(config=pb.StreamingSynthesisConfig(synthesis=pb.SynthesisConfig(voice="zed")))],
        "config.synthesis.voice: 'zed'",
    ),
    ("empty message", [config(), pb.StreamingSynthesizeRequest()], "payload: a message carried nothing"),
    ("min_chars too big", [config(min_chars=5000)], "config.buffering.min_chars: 5000 is over 1000"),
]


@pytest.mark.parametrize("name,messages,message", BAD_STREAMS, ids=[b[0] for b in BAD_STREAMS])
def test_bad_streams(stub, name, messages, message):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.StreamingSynthesize(iter(messages), timeout=30))
    expected = grpc.StatusCode.NOT_FOUND if name == "unknown voice" else grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.code() == expected, err.value.details()
    assert message in err.value.details()
    fine = [config(), delta("Still here."), pb.StreamingSynthesizeRequest(end_of_text=True)]
    assert list(stub.StreamingSynthesize(iter(fine), timeout=30)), "the server must keep serving after a bad stream"


# --- the segmenter ------------------------------------------------------------------------------------------------
def pieces_of(text, spans):
    return [text[a:b] for a, b in spans]


def fed(segmenter, delta):
    spans = segmenter.feed(delta)
    return [segmenter.text[a:b] for a, b in spans]


def test_sentence_end_needs_what_follows():
    s = IncrementalSegmenter(min_chars=60)
    assert s.feed("It costs 3.") == []  # "3." may be "3.14"
    assert fed(s, "14 dollars. Next") == ["It costs 3.14 dollars."]
    assert fed(s, "\n") == ["Next"]  # a line break ends a segment at once
    assert fed(s, "你好。今天") == ["你好。"]  # a CJK full stop needs nothing after it
    assert pieces_of(s.text, s.flush()) == ["今天"]
    assert s.text == "It costs 3.14 dollars. Next\n你好。今天"  # spans index the concatenated deltas


def test_clause_rule_and_max_chars():
    s = IncrementalSegmenter(min_chars=20)
    text = "Short, then a clause long enough, and the rest"
    spans = s.feed(text)
    assert pieces_of(s.text, spans) == ["Short, then a clause long enough,"]  # first mark past 20 characters
    long = IncrementalSegmenter(min_chars=20, max_chars=50)
    spans = long.feed("word " * 30)
    assert spans and all(b - a <= 50 for a, b in spans)
    assert all(not long.text[a:b].endswith("wor") for a, b in spans)  # cut at whitespace


def test_a_timer_flush_never_speaks_a_first_segment_shorter_than_the_first_rule():
    """A brain that stalls after its first word: "The" alone is not spoken (the voice says it as "that"); once the
    words reach the first rule's min_chars they are."""
    s = IncrementalSegmenter(first=FirstSegment(min_chars=12, words=2))
    s.feed("The ")
    assert s.flush(whole_words=True) == []
    s.feed("answer is ")
    assert pieces_of(s.text, s.flush(whole_words=True)) == ["The answer is"]
    s.feed("four ")
    assert pieces_of(s.text, s.flush(whole_words=True)) == ["four"]  # later segments: any whole words
    short = IncrementalSegmenter(first=FirstSegment(min_chars=12))
    spans = short.feed("Hi. ")
    assert pieces_of(short.text, spans) == ["Hi."]  # a sentence end is no timer: spoken as ever


def test_flush_whole_words_keeps_an_unfinished_word():
    s = IncrementalSegmenter()
    s.feed("Hello wor")
    assert pieces_of(s.text, s.flush(whole_words=True)) == ["Hello"]
    assert s.flush(whole_words=True) == []  # "wor" may still grow
    s.feed("ld")
    assert pieces_of(s.text, s.flush()) == ["world"]


async def test_stream_segments_timer_flush_and_end():
    queue: asyncio.Queue = asyncio.Queue()

    async def events():
        while (e := await queue.get()) is not None:
            yield e

    got = []
    segments = stream_segments(events(), BufferPolicy(min_chars=60, max_wait_s=0.05))
    queue.put_nowait(TextEvent(text="no punctuation here"))
    got.append((await anext(segments)).text)  # spoken by the timer, not by an end
    queue.put_nowait(TextEvent(text=" then. more"))
    got.append((await anext(segments)).text)
    queue.put_nowait(TextEvent(end=True))
    got.append((await anext(segments)).text)
    # The timer speaks complete words only: "here" might still grow, so it waits for the next delta.
    assert got == ["no punctuation", "here then.", "more"]
    queue.put_nowait(None)
    assert [s async for s in segments] == []


def fed_word_by_word(segmenter, text, step=" "):
    out = []
    for piece in text.split(step) if step else list(text):
        out += fed(segmenter, piece + (step or ""))
    return out


def test_the_first_segment_of_streaming_text_is_cut_after_a_few_complete_words():
    """Issue 23: a long first sentence of streamed text is cut where the same text in one piece is (after a few
    words), as soon as it is known to be long; later segments stay sentences."""
    text = "The weather service expects heavy rain over the northern hills tonight and for a while after."
    s = IncrementalSegmenter(min_chars=40, first=FirstSegment(words=5, max_chars=60))
    assert fed(s, "The weather service expects heav") == []
    assert fed(s, "y rain over the northern hil") == []  # 60 characters: the sentence may still end soon
    assert fed(s, "l") == ["The weather service expects heavy"]  # 61 and no end: long; "heavy" is complete
    rest = fed_word_by_word(s, "s tonight and for a while after. And after that, more.")
    # later segments are sentences, not 5 words ("And after that," is under min_chars 40: no clause cut)
    assert rest == ["rain over the northern hills tonight and for a while after.", "And after that, more."]
    one_piece = speech_segments(text, FirstSegment(words=5, max_chars=60))
    assert text[slice(*one_piece[0])] == "The weather service expects heavy"  # the same cut as whole text


def test_a_short_first_sentence_of_streaming_text_is_spoken_whole():
    """No cut inside a first sentence of up to max_chars: prosody (streamed = offline segmentation)."""
    s = IncrementalSegmenter(min_chars=60, first=FirstSegment(words=5, max_chars=60))
    assert fed_word_by_word(s, "Please call me back tomorrow morning. The meeting moved to room seven. ") == [
        "Please call me back tomorrow morning.",
        "The meeting moved to room seven.",
    ]


def test_the_first_segment_of_streaming_text_at_a_clause_mark():
    s = IncrementalSegmenter(min_chars=60, first=FirstSegment(words=8, min_chars=12, max_chars=40))
    got = fed_word_by_word(s, "Well, the forecast for the hills says rain, then sun and wind later tonight. ok")
    assert got == [
        "Well, the forecast for the hills says rain,",  # "Well," is under min_chars; the next mark is past it
        "then sun and wind later tonight.",
    ]


def test_the_first_segment_of_streaming_cjk_is_cut_after_n_characters():
    s = IncrementalSegmenter(min_chars=60, first=FirstSegment(cjk_chars=10, max_chars=60))
    got = fed_word_by_word(s, "今天天气很好我们一起去公园散步吧然后去吃饭。下一句。", step="")
    assert got == ["今天天气很好我们一起", "去公园散步吧然后去吃饭。", "下一句。"]


async def test_stream_segments_uses_the_policys_first_rule():
    async def events():
        for word in "Thanks for waiting on the line today, I have your order here. ".split(" "):
            yield TextEvent(text=word + " ")
        yield TextEvent(end=True)

    policy = BufferPolicy(min_chars=60, max_wait_s=5, first=FirstSegment(words=4, max_chars=40))
    got = [seg.text async for seg in stream_segments(events(), policy)]
    assert got == ["Thanks for waiting on the line today,", "I have your order here."]  # a mark past 12 chars


def test_a_word_of_a_long_stream_counts_only_once_whitespace_follows_it():
    s = IncrementalSegmenter(min_chars=60, first=FirstSegment(words=2, min_chars=4, max_chars=10))
    assert fed(s, "Antidisestablishmentarian") == []  # long already, but the word may still grow
    assert fed(s, "ism and") == []  # word 2 ("and") may still grow
    assert fed(s, " more") == ["Antidisestablishmentarianism and"]
