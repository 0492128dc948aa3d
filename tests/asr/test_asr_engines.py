"""asr parts in process: the endpointer's rules, Silero found without importing torch, the base model joined from
its wheels, and the GPU engine's code run on CPU with the real tiny.en model (no test double)."""

from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest

from bench import evaluation as ev
from services.common.config.asr import AsrGpuConfig, AsrServiceConfig
from services.common.engines import RESULT, SPEECH_END, SPEECH_START, Endpointing, RecognitionOptions
from services.common.errors import FailedPrecondition
from services.engines.asr.vad import WINDOW, Endpointer, SileroVad

# `make test`'s second lane (the engines' parts in process on whole files: no clock): scripts/test-lanes.sh.
pytestmark = pytest.mark.background

MS = 16  # samples per ms at 16 kHz


def run_endpointer(probabilities, **endpointing):
    ep = Endpointer(Endpointing(**endpointing))
    out = []
    for i, p in enumerate(probabilities):
        level = -20.0 if p >= 0.5 else -90.0  # loud speech, digital silence
        out += [(t.kind, t.offset // MS, t.reason) for t in ep.push(p, i * WINDOW, level)]
    out += [(t.kind, t.offset // MS, t.reason) for t in ep.flush(len(probabilities) * WINDOW)]
    return out


def test_endpointer_start_end_and_hangover():
    # 10 silent windows, 20 speech windows (640 ms), 5 silent (160 ms < hangover), 10 speech, then silence.
    probs = [0.0] * 10 + [0.9] * 20 + [0.0] * 5 + [0.9] * 10 + [0.0] * 20
    events = [e for e in run_endpointer(probs) if e[0] in ("start", "end")]
    assert events == [("start", 320, ""), ("end", 45 * 32, "endpoint")]  # one utterance: the short gap held


def test_endpointer_discards_speech_shorter_than_min_speech():
    probs = [0.0] * 5 + [0.9] * 5 + [0.0] * 20  # 160 ms blip
    assert [e[0] for e in run_endpointer(probs)] == ["candidate", "discard"]
    assert [e[0] for e in run_endpointer(probs, min_speech_ms=100)] == ["candidate", "start", "end"]


def test_endpointer_longer_hangover_joins_more():
    probs = [0.0] * 5 + [0.9] * 20 + [0.0] * 10 + [0.9] * 20 + [0.0] * 20  # a 320 ms pause
    assert sum(e[0] == "end" for e in run_endpointer(probs)) == 2
    assert sum(e[0] == "end" for e in run_endpointer(probs, hangover_ms=400)) == 1


def test_endpointer_max_utterance_cuts_and_goes_on():
    probs = [0.0] * 5 + [0.9] * 100 + [0.0] * 20  # 3.2 s of speech, max 1 s
    events = run_endpointer(probs, max_utterance_ms=1000)
    ends = [e for e in events if e[0] == "end"]
    assert [e[2] for e in ends] == ["max_utterance"] * 3 + ["endpoint"]
    starts = [e[1] for e in events if e[0] == "start"]
    assert starts[1:] == [e[1] for e in ends[:-1]]  # each forced end is the next utterance's start
    assert all(b - a <= 1000 + 32 for a, b in zip(starts, [e[1] for e in ends], strict=True))


def test_endpointer_text_veto_keeps_a_complete_judgement_open():
    """Semantic mode with a turn model that always says complete: the veto (the text check) turns each complete
    judgement into an open one naming the word, until max_silence; no veto, the first judgement ends the utterance."""
    probs = [0.0] * 5 + [0.9] * 20 + [0.0] * 60  # 640 ms of speech, then 1.9 s of silence
    semantic = Endpointing(mode="semantic", max_silence_ms=1000, early_silence_ms=0)  # the next test has it

    def run(veto):
        ep = Endpointer(semantic, lambda heard_end, speech_end: 0.9, 200, 200, veto)
        out = []
        for i, p in enumerate(probs):
            out += ep.push(p, i * WINDOW, -20.0 if p >= 0.5 else -90.0)
        return out

    asked = []
    held = run(lambda: asked.append(1) or "the")
    turns = [t for t in held if t.kind == "turn"]
    # at 160 ms, and at 224 (the model then hears all its 200 ms of silence; nothing new to hear after that)
    assert [(t.complete, t.vetoed_by_word) for t in turns] == [(False, "the"), (False, "the")]
    assert [t.reason for t in held if t.kind == "end"] == ["max_silence"] and len(asked) == 2
    ended = run(lambda: "")
    assert [(t.kind, t.complete, t.vetoed_by_word, t.reason) for t in ended if t.kind in ("turn", "end")] == [
        ("turn", True, "", ""),
        ("end", False, "", "turn_complete"),
    ]


def test_endpointer_judges_early_only_a_turn_the_model_is_sure_of_and_once_more_when_it_hears_all():
    """Semantic defaults (early 96 ms at 0.85, min_silence 160, heard silence 200): what the model is asked to hear
    (ms of silence after the speech) and what each judgement did, for a model sure, merely leaning, and unsure."""
    probs = [0.0] * 5 + [0.9] * 20 + [0.0] * 60  # 640 ms of speech, then 1.9 s of silence

    def run(p):
        heard = []

        def judge(heard_end, speech_end):
            heard.append((heard_end - speech_end) * 1000 // 16000)
            return p

        ep = Endpointer(Endpointing(mode="semantic", max_silence_ms=1000), judge, 200, 200)
        out = []
        for i, prob in enumerate(probs):
            out += ep.push(prob, i * WINDOW, -20.0 if prob >= 0.5 else -90.0)
        turns = [(t.complete, t.silence * 1000 // 16000) for t in out if t.kind == "turn"]
        return heard, turns, [t.reason for t in out if t.kind == "end"]

    assert run(0.95) == ([96], [(True, 96)], ["turn_complete"])  # sure: ends at the early judgement
    assert run(0.7) == ([96, 160], [(True, 160)], ["turn_complete"])  # not sure: the early one said nothing
    # Unfinished: judged at 160, again as soon as it hears its 200 ms of silence (not 200 ms later), then no more.
    assert run(0.1) == ([96, 160, 200], [(False, 160), (False, 224)], ["max_silence"])


def test_the_early_judgement_waits_for_as_much_quiet_after_a_weak_last_sound():
    """A last sound 37 dB under the peak (a weak "to"): the end of speech is moved back over it, but the level is not
    quiet there. The early judgement (and the pause's decode it starts) waits until the level has been quiet for the
    early silence too: at 128 ms after the end of speech with one such window, never before the sound has 96 ms of
    quiet after it."""

    def run(weak_windows):
        heard = []

        def judge(heard_end, speech_end):
            heard.append((heard_end - speech_end) * 1000 // 16000)
            return 0.95

        ep = Endpointer(Endpointing(mode="semantic", max_silence_ms=1000), judge, 200, 200)
        levels = [(0.0, -90.0)] * 5 + [(0.9, -20.0)] * 20 + [(0.9, -57.0)] * weak_windows + [(0.0, -90.0)] * 40
        out = []
        for i, (prob, level) in enumerate(levels):
            out += ep.push(prob, i * WINDOW, level)
        return heard, [t.reason for t in out if t.kind == "end"]

    assert run(0) == ([96], ["turn_complete"])
    assert run(1) == ([128], ["turn_complete"])
    assert run(2) == ([160], ["turn_complete"])  # by then it is the judgement at min_silence


def test_silero_is_found_without_importing_its_package():
    vad = SileroVad("test")
    assert vad.path.name == "silero_vad.onnx" and "silero_vad" in str(vad.path)
    assert "silero_vad" not in sys.modules and "torch" not in sys.modules
    state = vad.new_state()
    import numpy as np

    assert vad.probability(state, np.zeros(WINDOW, dtype=np.float32)) < 0.1


def test_base_model_is_joined_from_its_two_wheels(tmp_path):
    from services.engines.asr.models import BASE_PARTS, _package_dir, base_model_dir

    path = base_model_dir(tmp_path)
    parts = [_package_dir(pkg) / "data" / part for pkg, part in BASE_PARTS]
    assert (path / "model.bin").stat().st_size == sum(p.stat().st_size for p in parts)
    with open(path / "model.bin", "rb") as f, open(parts[0], "rb") as first:
        assert f.read(4096) == first.read(4096)
    assert {p.name for p in path.iterdir()} == {"model.bin", "config.json", "tokenizer.json", "vocabulary.json"}
    assert base_model_dir(tmp_path) == path  # the second call reuses it


async def collect(stream, pcm: bytes) -> list:
    events = []

    async def consume():
        async for event in stream.events():
            events.append(event)

    task = asyncio.create_task(consume())
    for i in range(0, len(pcm), 3200):
        await stream.feed(pcm[i : i + 3200])
    await stream.finish()
    await task
    await stream.close()
    return events


async def test_gpu_engine_code_on_cpu_with_tiny_en(asr_speakers):
    """GpuAsrEngine with asr.gpu.device=cpu and the tiny.en model from its wheel: the same calls it makes on CUDA
    (word timestamps, whisper re-decodes as interim results), checked on what it hears."""
    from services.engines.asr.gpu_engine import GpuAsrEngine
    from services.engines.asr.models import tiny_en_dir

    config = AsrServiceConfig(
        port=1,
        engine="gpu",
        gpu=AsrGpuConfig(model_dir=str(tiny_en_dir()), device="cpu", compute_type="int8", num_workers=1, beam_size=1),
    )
    engine = GpuAsrEngine("asr_gpu_on_cpu", config)
    await engine.start()
    try:
        text = ev.SENTENCES[2]
        stream = asr_speakers.padded("joe", [text], 16000)
        events = await collect(
            await engine.open_stream(RecognitionOptions(language="en", interim_results=True)), stream.pcm
        )
        kinds = [e.kind for e in events]
        assert kinds[0] == SPEECH_START and SPEECH_END in kinds
        results = [e.result for e in events if e.kind == RESULT]
        assert results[-1].is_final and not any(r.is_final for r in results[:-1])
        assert any(r.transcript for r in results[:-1]), "whisper re-decodes gave no interim result"
        final = results[-1]
        assert ev.wer([text], [final.transcript]) <= 0.15
        assert [w.word.strip(",.").lower() for w in final.words] == ev.words(final.transcript)
        u = stream.utterances[0]
        assert all(u.start_ms - 300 <= w.start_ms <= w.end_ms <= u.end_ms + 300 for w in final.words)
    finally:
        await engine.close()


async def test_gpu_engine_offload_frees_the_model_and_reload_hears_the_same(asr_speakers):
    """A revoke's offload really takes the weights off the model's device (CTranslate2's unload_model: the model
    reports not loaded and refuses new streams) and reload brings back the same model: the same transcript."""
    from services.engines.asr.gpu_engine import GpuAsrEngine
    from services.engines.asr.models import tiny_en_dir

    config = AsrServiceConfig(
        port=1,
        engine="gpu",
        gpu=AsrGpuConfig(model_dir=str(tiny_en_dir()), device="cpu", compute_type="int8", num_workers=1, beam_size=1),
    )
    engine = GpuAsrEngine("asr_gpu_on_cpu", config)
    await engine.start()
    stream = asr_speakers.padded("joe", [ev.SENTENCES[4]], 16000)
    options = RecognitionOptions(language="en", interim_results=False)

    async def final_transcript() -> str:
        events = await collect(await engine.open_stream(options), stream.pcm)
        return [e.result for e in events if e.kind == RESULT][-1].transcript

    try:
        before = await final_transcript()
        assert ev.wer([ev.SENTENCES[4]], [before]) <= 0.2, before
        await engine.offload()
        assert not engine.final.model.model.model_is_loaded
        with pytest.raises(FailedPrecondition, match="loading"):
            await engine.open_stream(options)
        await engine.reload()
        assert engine.final.model.model.model_is_loaded
        assert await final_transcript() == before
    finally:
        await engine.close()


async def test_gpu_engine_offload_drains_the_interim_redecode_in_flight(asr_speakers):
    """An interim re-decode still running on the stream pool when a revoke comes (offload used to wait on the final
    pool only, and CTranslate2's unload_model does nothing while the model is busy): offload waits for it, the
    re-decode hears its words, and the model is then really unloaded."""
    from services.engines.asr.gpu_engine import GpuAsrEngine
    from services.engines.asr.models import tiny_en_dir

    config = AsrServiceConfig(
        port=1,
        engine="gpu",
        gpu=AsrGpuConfig(model_dir=str(tiny_en_dir()), device="cpu", compute_type="int8", num_workers=1, beam_size=1),
    )
    engine = GpuAsrEngine("asr_gpu_on_cpu", config)
    engine.final.load()
    texts = list(ev.SENTENCES[:3])
    pcm = asr_speakers.padded("joe", texts, 16000).pcm
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    try:
        loop = asyncio.get_running_loop()
        interim = loop.run_in_executor(engine.stream_pool, engine.final.quick, audio, "en")
        while engine.final.gate.busy == 0 and not interim.done():  # noqa: ASYNC110 (a counter set by a pool thread)
            await asyncio.sleep(0.001)
        assert not interim.done(), "the re-decode ended before the offload could race it"
        await engine.offload()
        assert interim.done()
        assert ev.wer([" ".join(texts)], [interim.result()]) <= 0.2
        assert not engine.final.model.model.model_is_loaded
        await engine.reload()
        assert engine.final.model.model.model_is_loaded
    finally:
        await engine.close()


async def test_gpu_engine_refuses_a_missing_model_dir(tmp_path):
    from services.engines.asr.gpu_engine import GpuAsrEngine

    engine = GpuAsrEngine("asr", AsrServiceConfig(port=1, engine="gpu", gpu=AsrGpuConfig(model_dir=str(tmp_path))))
    with pytest.raises(FailedPrecondition, match="asr.gpu.model_dir"):
        await engine.start()
    await engine.close()


async def test_interim_budget_leaves_finals_whole_and_comes_back(asr_speakers):
    """asr.max_concurrent_interims=1: while one utterance runs pass 1, another stream's utterance gets its final (right)
    and no interims; once the first ends, interims come back. No stream is refused for it."""
    from services.common import metrics
    from services.engines.asr.cpu_engine import CpuAsrEngine

    engine = CpuAsrEngine("asr_budget", AsrServiceConfig(port=1, max_concurrent_interims=1))
    await engine.start()
    skipped = metrics.ASR_INTERIMS_SKIPPED.labels("asr_budget", engine.name)
    options = RecognitionOptions(language="en", interim_results=True)
    try:
        holder_text, other_text = ev.SENTENCES[1], ev.SENTENCES[2]
        holder_pcm = asr_speakers.padded("joe", [holder_text], 16000).pcm
        holder = await engine.open_stream(options)
        holder_events: list = []
        reader = asyncio.create_task(_gather(holder, holder_events))
        half = len(holder_pcm) // 2 // 2 * 2  # mid-sentence: its utterance holds the one slot
        for i in range(0, half, 3200):
            await holder.feed(holder_pcm[i : min(i + 3200, half)])
        assert engine.interim_budget._used == 1

        before = skipped._value.get()
        other = await collect(await engine.open_stream(options), asr_speakers.padded("joe", [other_text], 16000).pcm)
        results = [e.result for e in other if e.kind == RESULT]
        assert [r.is_final for r in results] == [True]  # its final, no interims
        assert ev.wer([other_text], [results[0].transcript]) <= 0.15
        assert skipped._value.get() == before + 1

        for i in range(half, len(holder_pcm), 3200):
            await holder.feed(holder_pcm[i : i + 3200])
        await holder.finish()
        await reader
        await holder.close()
        held = [e.result for e in holder_events if e.kind == RESULT]
        assert any(not r.is_final for r in held) and held[-1].is_final
        assert ev.wer([holder_text], [held[-1].transcript]) <= 0.15
        assert engine.interim_budget._used == 0  # given back at the utterance's end

        again = await collect(await engine.open_stream(options), asr_speakers.padded("joe", [other_text], 16000).pcm)
        assert any(e.kind == RESULT and not e.result.is_final for e in again)
    finally:
        await engine.close()


async def _gather(stream, into: list) -> None:
    async for event in stream.events():
        into.append(event)


def test_a_final_that_repeats_itself_is_decoded_again_with_the_full_window():
    """The fitted encoder window (asr.final_window_min_seconds) sometimes makes whisper say a short utterance twice;
    such a final is not kept (services/engines/asr/cpu_engine.py, repeats_itself)."""
    from services.engines.asr.cpu_engine import repeats_itself

    assert repeats_itself("Hello. My name is Alice. Hello. My name is Alice.")
    assert repeats_itself("the children are playing the children are playing in the garden")
    assert not repeats_itself("Hello, my name is Alice.")
    assert not repeats_itself("no no no, the cat and the dog and the bird")


def test_a_final_said_twice_faster_than_speech_takes_the_beams_once_said_hypothesis():
    """Through the fleet, piper's "What is the capital of France?" (1.76 s) came back from the fitted window as the
    sentence twice, three times out of three (2026-11-28, 2-core AMD EPYC), and the full-window decode that followed
    put the reply 1.25-1.47 s after the file ended, against ~0.4 s for the same question about Germany. Twelve words
    in ~2 s of audio cannot have been spoken; the beam holds the sentence said once: that is the final."""
    from services.engines.asr.cpu_engine import repeats_itself, said_once

    twice = "What is the capital of France? What is the capital of France?"
    beam = ("What is the capital of friends?", "What is the capital of France?", "what is the capital of France?")
    assert said_once(twice, beam, 2.0, repeats_itself) == "What is the capital of France?"
    # Said twice at a pace the audio holds: a caller may repeat themselves; decode again with the full window.
    assert said_once(twice, beam, 3.5, repeats_itself) is None
    # No hypothesis is the text's beginning (the beam went elsewhere), or the only one repeats too: decode again.
    assert said_once(twice, ("Where is the capital of France?",), 2.0, repeats_itself) is None
    assert said_once(twice, (twice, "What is the capital of France? What"), 2.0, repeats_itself) is None


def test_pass1_process_that_dies_is_replaced_and_interims_come_back(monkeypatch, asr_speakers):
    """Pass 1 runs in a child process (services/engines/asr/pass1_process.py). Killed mid-utterance: that call gets no
    hypothesis (no error reaches the stream), and the next utterance is decoded by a new child."""
    import numpy as np

    from services.engines.asr import pass1_process
    from services.engines.asr.cpu_engine import PocketsphinxPartial, PocketsphinxPool

    monkeypatch.setattr(pass1_process, "RESTART_PAUSE_S", 0.0)
    pcm = np.frombuffer(asr_speakers.padded("joe", ["hello world this is a test"], 16000).pcm, dtype=np.int16)
    pool = PocketsphinxPool()
    try:

        def utterance(kill_midway: bool = False) -> str:
            partial = PocketsphinxPartial(pool)
            partial.start()
            for i in range(0, len(pcm), 512):
                if kill_midway and i >= len(pcm) // 2:
                    kill_midway = False
                    pool.process._process.kill()
                    pool.process._process.wait()
                partial.accept(pcm[i : i + 512])
            text = partial.hypothesis()
            partial.release()
            return text

        assert utterance(), "pass 1 heard nothing in a clear sentence"
        first = pool.process._process.pid
        assert utterance(kill_midway=True) == ""  # its decoder died with the child: no interims, and no error
        assert utterance() == "hello world this is a test", "no new pass-1 process after the first died"
        assert pool.process.restarts == 1 and pool.process._process.pid != first
    finally:
        pool.close()


def test_pass1_decoders_are_lent_per_utterance_and_bounded(asr_speakers):
    """Each pass-1 decoder holds ~90 MB of pocketsphinx's models, so the pool lends one to an utterance, not to a
    stream, and makes no more than its limit (the interim slots): an utterance that ended gives its decoder to the
    next one, whichever stream it is on, and the spare made ahead is a real decoder that hears the sentence."""
    import numpy as np

    from services.engines.asr.cpu_engine import PocketsphinxPartial, PocketsphinxPool

    pcm = np.frombuffer(asr_speakers.padded("joe", ["hello world this is a test"], 16000).pcm, dtype=np.int16)
    pool = PocketsphinxPool(limit=2)
    try:
        pool.warm(1)
        first, second, third = (PocketsphinxPartial(pool) for _ in range(3))

        def hear(partial) -> str:
            for i in range(0, len(pcm), 512):
                partial.accept(pcm[i : i + 512])
            return partial.hypothesis()

        first.start()  # takes the warm decoder; a spare is asked for
        second.start()  # takes the spare, made by now or at this start
        assert pool.created == 2
        assert hear(first) == "hello world this is a test"
        assert hear(second) == "hello world this is a test", "the decoder made ahead did not decode"
        first.end()
        third.start()  # the first utterance's decoder, not a third one
        assert hear(third) == "hello world this is a test"
        assert pool.created == 2, f"{pool.created} decoders made for two utterances at once (limit 2)"
        second.end()
        third.end()
        first.start()  # a stream's next utterance takes whichever decoder is free
        assert hear(first) == "hello world this is a test"
        first.release()
        assert pool.created == 2
    finally:
        pool.close()
