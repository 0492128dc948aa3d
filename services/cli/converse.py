"""``voicefleet converse``: talk to the fleet's Conversation service from WAV files, one file per user turn.

voicefleet converse in.wav -o reply.wav              one turn; prints the transcript, the reply text, first audio
voicefleet converse --turns a.wav b.wav c.wav        a multi-turn script (replies to reply-1.wav, reply-2.wav, ...)

The client behaves like a microphone: after config it sends audio continuously in 40 ms frames at the pace of real
time, the file's speech and then silence, until the agent's turn is complete; the server's endpointer decides when
the user's turn is over (``--fast``: the file goes as fast as possible, then ACTION_END_OF_TURN).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from services.common import audio
from voice.v1 import audio_pb2, conversation_pb2, conversation_pb2_grpc, routing_pb2

FRAME_MS = 40
STATE_NAMES = {
    conversation_pb2.CONVERSATION_STATE_LISTENING: "listening",
    conversation_pb2.CONVERSATION_STATE_THINKING: "thinking",
    conversation_pb2.CONVERSATION_STATE_SPEAKING: "speaking",
}


@dataclass
class Turn:
    pcm: bytes
    rate: int
    done: threading.Event = field(default_factory=threading.Event)
    sent_at: float | None = None  # when the last frame of the file went out
    first_audio_at: float | None = None
    reply_pcm: bytearray = field(default_factory=bytearray)
    reply_rate: int = 0
    user_text: str = ""
    reply_text: str = ""
    server_first_audio_ms: int = 0
    error: str = ""
    interrupted: bool = False


def requests(config, turns: list[Turn], realtime: bool, stop: threading.Event):
    """Config, then per turn: the file's audio, then silence until the turn is answered."""
    yield conversation_pb2.ConverseRequest(config=config)
    rate = config.input_format.sample_rate_hz
    step = rate * FRAME_MS // 1000 * audio.BYTES_PER_SAMPLE
    silence = bytes(step)
    t0 = time.monotonic()
    n = 0

    def pace():
        nonlocal n
        n += 1
        if realtime:
            time.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - time.monotonic()))

    for turn in turns:
        for start in range(0, len(turn.pcm), step):
            if stop.is_set():
                return
            pace()
            yield conversation_pb2.ConverseRequest(audio=turn.pcm[start : start + step])
        turn.sent_at = time.monotonic()
        if not realtime:
            yield conversation_pb2.ConverseRequest(audio=silence * 8)
            yield conversation_pb2.ConverseRequest(
                control=conversation_pb2.ConversationControl(
                    action=conversation_pb2.ConversationControl.ACTION_END_OF_TURN
                )
            )
        while not turn.done.is_set() and not stop.is_set():
            # Like a microphone: silence keeps flowing while the agent thinks and speaks (at the pace of real time).
            if realtime:
                pace()
            else:
                time.sleep(FRAME_MS / 1000)
            yield conversation_pb2.ConverseRequest(audio=silence)


def run(args, address: str) -> int:
    files = list(args.turns or []) or ([args.input] if args.input else [])
    if not files:
        sys.exit("error: give a WAV file (voicefleet converse in.wav) or --turns a.wav b.wav ...")
    if args.max_tokens is not None and not 1 <= args.max_tokens < 2**32:
        sys.exit(f"error: --max-tokens must be a positive number of tokens, not {args.max_tokens}")
    turns = []
    rate = None
    for path in files:
        try:
            pcm, r = audio.read_wav(path)
        except (OSError, ValueError, EOFError) as e:
            sys.exit(f"error: cannot read {path}: {e}")
        if rate is not None and r != rate:
            pcm = audio.resample(pcm, r, rate)
        rate = rate or r
        turns.append(Turn(pcm, rate))
    config = conversation_pb2.ConversationConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
        output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=args.rate or 0, channels=1),
        voice=args.voice or "",
        system_prompt=args.system or "",
        language=args.language or "",
        routing=routing_pb2.Routing(engine=args.engine or ""),
        sampling=conversation_pb2.SamplingConfig(max_tokens=args.max_tokens or 0),
        # A file never hears the reply, and --fast sends it faster than a microphone, which the server's canceller
        # assumes (docs/conversation.md#echo-the-agents-own-voice-is-not-a-barge-in).
        client_cancels_echo=True,
    )
    stop = threading.Event()
    realtime = not args.fast
    print(
        f"conversation with {address}: {len(turns)} turn(s), sent {'in real time' if realtime else 'fast'}", flush=True
    )
    t0 = time.monotonic()
    from services.cli.common import Patience

    # Waits for the router's voice.v1.Conversation to be ready (--wait); not retried after that: a conversation
    # streams the user's audio in real time and is not replayed from here.
    with Patience(args).channel(address, "voice.v1.Conversation") as channel:
        stub = conversation_pb2_grpc.ConversationStub(channel)
        timeout = args.timeout or sum(len(t.pcm) / 2 / rate for t in turns) * 2 + 60 * len(turns)
        call = stub.Converse(requests(config, turns, realtime, stop), timeout=timeout)
        try:
            for reply in call:
                now = time.monotonic()
                i = reply.turn_index
                turn = turns[i] if i < len(turns) else None
                kind = reply.WhichOneof("event")
                stamp = f"[{now - t0:6.2f}s] turn {i}"
                if kind == "state":
                    print(f"{stamp} {STATE_NAMES.get(reply.state.state, '?')}", flush=True)
                elif kind == "user_transcript":
                    r = reply.user_transcript
                    if r.is_final:
                        print(f"{stamp} you said: {r.transcript}", flush=True)
                    elif args.interim:
                        print(f"{stamp}   (hearing: {r.transcript})", flush=True)
                elif kind == "reply_text" and args.interim:
                    print(f"{stamp}   (reply text: {reply.reply_text.delta!r})", flush=True)
                elif kind == "reply_audio" and turn is not None:
                    if turn.first_audio_at is None:
                        turn.first_audio_at = now
                        print(f"{stamp} first reply audio", flush=True)
                    turn.reply_pcm += reply.reply_audio.data
                    turn.reply_rate = reply.reply_audio.format.sample_rate_hz
                elif kind == "interrupted":
                    print(f"{stamp} interrupted ({reply.interrupted.reason}); heard: {reply.interrupted.heard_text!r}")
                elif kind == "turn_error" and turn is not None:
                    turn.error = f"{grpc.StatusCode(_code(reply.turn_error.code)).name}: {reply.turn_error.message}"
                    print(f"{stamp} turn failed: {turn.error}", flush=True)
                    turn.done.set()
                elif kind == "turn_complete" and turn is not None:
                    c = reply.turn_complete
                    turn.user_text, turn.reply_text, turn.interrupted = c.user_text, c.reply_text, c.interrupted
                    turn.server_first_audio_ms = c.timings.speech_end_to_first_audio_ms
                    print(f"{stamp} agent said: {c.reply_text}", flush=True)
                    turn.done.set()
                if all(t.done.is_set() for t in turns):
                    stop.set()
                    break
        except grpc.RpcError as e:
            stop.set()
            sys.exit(f"error: {e.code().name}: {e.details()}")
        finally:
            stop.set()
            call.cancel()
    out = Path(args.output)
    print()
    for n, turn in enumerate(turns):
        path = out if len(turns) == 1 else out.with_name(f"{out.stem}-{n + 1}{out.suffix or '.wav'}")
        if turn.reply_pcm:
            audio.write_wav(path, bytes(turn.reply_pcm), turn.reply_rate)
        print(f"turn {n + 1}: transcript: {turn.user_text!r}")
        print(f"        reply:      {turn.reply_text!r}" + (" (interrupted)" if turn.interrupted else ""))
        if turn.error:
            print(f"        failed:     {turn.error}")
        if turn.first_audio_at and turn.sent_at:
            seconds = len(turn.reply_pcm) / 2 / max(1, turn.reply_rate)
            print(
                f"        time to first audio: {(turn.first_audio_at - turn.sent_at) * 1000:.0f} ms after the file's"
                f" last frame was sent; server: {turn.server_first_audio_ms} ms after your speech ended;"
                f" wrote {path} ({seconds:.2f} s)"
            )
    return 0 if all(not t.error for t in turns) else 1


def _code(number: int):
    return next((c for c in grpc.StatusCode if c.value[0] == number), grpc.StatusCode.UNKNOWN).value


def add_parser(sub, address_of) -> None:
    p = sub.add_parser("converse", help="talk to the Conversation service with WAV files (one per user turn)")
    p.add_argument("input", nargs="?", help="16-bit PCM WAV of the user's turn (8..48 kHz)")
    p.add_argument("--turns", nargs="+", metavar="WAV", help="a multi-turn script: one WAV per user turn")
    p.add_argument("-o", "--output", default="reply.wav", help="reply WAV (several turns: reply-1.wav, ...)")
    p.add_argument("--system", help="system prompt for the reply model")
    p.add_argument("--voice", help="reply voice id")
    p.add_argument("--language", default="en-US", help="BCP-47 language of the dialogue (default en-US)")
    p.add_argument("--rate", type=int, help="reply audio sample rate in Hz (default 16000)")
    p.add_argument("--engine", help="routing: pin a backend (moss_sts)")
    p.add_argument("--max-tokens", type=int, help="longest reply in tokens (default: the service's)")
    p.add_argument("--interim", action="store_true", help="print interim transcripts and reply text deltas")
    p.add_argument("--fast", action="store_true", help="send each file as fast as possible, then end the turn")
    p.add_argument("--timeout", type=float, help="deadline in seconds (default: generous, from the audio)")
    p.set_defaults(fn=lambda args: run(args, address_of(args)))
