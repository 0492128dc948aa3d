"""``voicefleet``: start the local fleet and talk to it.

voicefleet up                          start the CPU fleet (router on 127.0.0.1:50051); Ctrl-C stops it
voicefleet speak "TEXT" -o out.wav     synthesize through the router; prints time to first audio and RTF
voicefleet speak "TEXT" --stream-text  feed the text word by word (StreamingSynthesize); when did audio start
voicefleet voices                      every voice of every TTS backend, by service/engine
voicefleet register-voice NAME prompt.wav "transcript"   clone a voice (engines that can clone)
voicefleet transcribe in.wav --interim recognize speech in a WAV through the router; prints latencies
voicefleet converse in.wav -o out.wav  one spoken turn with the Conversation service (--turns a.wav b.wav ...)
voicefleet status                      health of the router and every backend
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import grpc

from services.cli.common import MODES, Patience, fail, first_reply_now, load_cli_config, router_address
from services.common import audio, security
from services.common.convert.asr import endpointing_proto
from services.common.endpointing import BY_NAME as ENDPOINTING
from services.residency.lease_client import authority_addresses
from voice.v1 import (
    audio_pb2,
    fleet_pb2,
    fleet_pb2_grpc,
    gpu_pb2,
    gpu_pb2_grpc,
    recognizer_pb2,
    recognizer_pb2_grpc,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)


# --- up ---------------------------------------------------------------------------------------------------------
def cmd_up(args) -> int:
    from services.cli.fleet import LocalFleet
    from services.cli.supervisor import READY, Supervisor

    config = load_cli_config(args)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def say(message: str) -> None:
        print(f"voicefleet: {message}", file=sys.stderr, flush=True)

    supervisor = Supervisor(LocalFleet(config, args.config), log=say)
    names = ", ".join(config.fleet.services)
    print(f"voicefleet: starting {names} ...", flush=True)
    t0 = time.monotonic()
    supervisor.start()
    supervisor.serve_http(config.fleet.supervisor_port)
    if supervisor.wait_ready(config.fleet.start_timeout_seconds, interrupted=stop):
        print(f"\nvoicefleet is up in {time.monotonic() - t0:.1f}s (CPU engines):")
        for m in supervisor.fleet.members.values():
            front = "  <- the front door" if m.name == "router" else ""
            if m.name == "brain":  # not a gRPC service: llama.cpp's OpenAI-compatible HTTP server
                print(f"  {m.name:<14} http {m.address:<16} OpenAI-compatible chat (http://{m.address}/v1)")
                continue
            if m.name == "gateway":  # HTTP: the page, the conversation WebSocket, OpenAI-compatible audio
                scheme = "https" if config.security.tls_cert else "http"
                print(
                    f"  {m.name:<14} http {m.address:<16} open {scheme}://{m.address}/ in a browser"
                    f" (metrics http://127.0.0.1:{m.metrics_port}/metrics)"
                )
                continue
            print(f"  {m.name:<14} grpc {m.address:<16} metrics http://127.0.0.1:{m.metrics_port}/metrics{front}")
        if config.fleet.supervisor_port:
            print(f"  supervisor     http 127.0.0.1:{config.fleet.supervisor_port:<6}     /members, /metrics")
        print('\nTry:  voicefleet speak "hello world this is a test" -o out.wav')
        print(
            "A member that exits is restarted (voicefleet status shows restarts). Ctrl-C stops the fleet.\n", flush=True
        )
    elif not stop.is_set():
        waiting = [f"{s['name']} ({s['state']})" for s in supervisor.snapshot() if s["state"] != READY]
        say(f"not every member is ready after {time.monotonic() - t0:.0f}s: {', '.join(waiting)}; the rest serve")
    code = 0
    while not stop.wait(0.5):
        states = supervisor.snapshot()
        if all(s["state"] in ("gave-up", "exited") for s in states):
            say("every member is down and none will be restarted; stopping")
            code = 1
            break
    print("voicefleet: stopping (draining in-flight streams) ...", flush=True)
    codes = supervisor.stop()
    print("voicefleet: stopped " + ", ".join(f"{n} ({c})" for n, c in codes.items()), flush=True)
    return code


# --- speak -------------------------------------------------------------------------------------------------------
def cmd_speak(args) -> int:
    if getattr(args, "stream_text", False):
        from services.cli.tts import cmd_speak_stream

        return cmd_speak_stream(args)
    config = load_cli_config(args)
    request = synthesizer_pb2.SynthesizeRequest(
        text=args.text,
        config=synthesizer_pb2.SynthesisConfig(
            voice=args.voice or "",
            language=args.language or "",
            output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=args.rate or 0, channels=1),
            speaking_rate=args.speaking_rate or 0.0,
            routing=routing_pb2.Routing(mode=MODES.get(args.mode, 0), engine=args.engine or ""),
        ),
    )
    patience = Patience(args)
    with patience.channel(router_address(args, config), "voice.v1.Synthesizer") as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        t0 = time.monotonic()
        first = None
        pcm = bytearray()
        rate = 0
        served_by = ""

        def call():
            nonlocal t0
            t0 = time.monotonic()  # the attempt that is served
            return first_reply_now(stub.Synthesize(request, timeout=args.timeout))

        try:
            for reply in patience.call(call):
                if first is None:
                    first = time.monotonic() - t0
                pcm += reply.audio.data
                rate = reply.audio.format.sample_rate_hz
                served_by = reply.served_by
        except grpc.RpcError as e:
            fail(e)
        wall = time.monotonic() - t0
    if not pcm:
        sys.exit("error: the service returned no audio")
    audio.write_wav(args.output, bytes(pcm), rate)
    seconds = len(pcm) / 2 / rate
    print(
        f"wrote {args.output}: {seconds:.2f} s at {rate} Hz, served by {served_by}\n"
        f"time to first audio: {first * 1000:.0f} ms; total {wall * 1000:.0f} ms; RTF {wall / seconds:.3f}"
    )
    return 0


# --- transcribe --------------------------------------------------------------------------------------------------
CHUNK_MS = 100


def _recognize_requests(pcm: bytes, rate: int, config, realtime: bool, sent: dict):
    """Config, then the audio in 100 ms messages, at the pace of real time unless --fast."""
    yield recognizer_pb2.StreamingRecognizeRequest(config=config)
    t0 = sent["t0"] = time.monotonic()
    step = rate * CHUNK_MS // 1000 * audio.BYTES_PER_SAMPLE
    for i, start in enumerate(range(0, len(pcm), step)):
        if realtime:
            time.sleep(max(0.0, t0 + i * CHUNK_MS / 1000 - time.monotonic()))
        yield recognizer_pb2.StreamingRecognizeRequest(audio=pcm[start : start + step])
    sent["done"] = time.monotonic()


def cmd_transcribe(args) -> int:
    config = load_cli_config(args)
    try:
        pcm, rate = audio.read_wav(args.input)
    except (OSError, ValueError, EOFError) as e:
        sys.exit(f"error: cannot read {args.input}: {e}")
    realtime = not args.fast
    rc = recognizer_pb2.RecognitionConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
        language=args.language or "",
        interim_results=args.interim,
        phrase_hints=args.hint or [],
        spot_phrases=args.spot or [],
        endpointing=endpointing_proto({"hangover_ms": args.hangover_ms or 0, "mode": args.endpointing or ""}),
    )
    sent: dict = {}
    seconds = len(pcm) / 2 / rate
    pace = "in real time" if realtime else "as fast as possible"
    print(f"{args.input}: {seconds:.2f} s at {rate} Hz, sent {pace}", flush=True)
    first_interim = None  # (received, speech start offset)
    speech_end_at: dict[int, float] = {}  # utterance -> when its SPEECH_END arrived
    finals = []
    last_start = 0
    patience = Patience(args)
    with patience.channel(router_address(args, config), "voice.v1.Recognizer") as channel:
        stub = recognizer_pb2_grpc.RecognizerStub(channel)
        try:
            replies = patience.call(
                lambda: first_reply_now(
                    stub.StreamingRecognize(
                        _recognize_requests(pcm, rate, rc, realtime, sent), timeout=args.timeout or seconds * 3 + 60
                    )
                )
            )
            for reply in replies:
                now = time.monotonic()
                t = now - sent.get("t0", now)
                kind = reply.WhichOneof("event")
                if kind == "vad":
                    if reply.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_START:
                        last_start = reply.vad.offset_ms
                        print(f"[{t:6.2f}s] speech start at {reply.vad.offset_ms / 1000:.2f} s")
                    else:
                        speech_end_at[len(finals)] = now
                        print(f"[{t:6.2f}s] speech end at {reply.vad.offset_ms / 1000:.2f} s")
                    continue
                if kind == "phrase_spotted":
                    s = reply.phrase_spotted
                    print(
                        f"[{t:6.2f}s] spotted {s.phrase!r} in utterance #{s.utterance_index}: {s.transcript!r}"
                        f" (audio to {s.offset_ms / 1000:.2f} s)"
                    )
                    continue
                if kind == "end_of_turn":
                    e = reply.end_of_turn
                    vetoed = f", kept open by the text: it ends with {e.vetoed_by_word!r}" if e.vetoed_by_word else ""
                    if e.sentence_end:
                        vetoed = f", but the words read as a finished sentence: {e.transcript!r}"
                    print(
                        f"[{t:6.2f}s] end of turn? {'complete' if e.complete else 'not yet'}: p={e.probability:.2f}"
                        f" after {e.silence_ms} ms of silence (at {e.offset_ms / 1000:.2f} s){vetoed}"
                    )
                    continue
                r = reply.result
                if not r.is_final:
                    first_interim = first_interim or (t, last_start)
                    print(f"[{t:6.2f}s]   interim: {r.transcript}  (stability {r.stability:.2f})")
                    continue
                finals.append((t, r, speech_end_at.get(r.utterance_index)))
                print(
                    f"[{t:6.2f}s] final #{r.utterance_index}: {r.transcript}"
                    f"  ({r.utterance_start_ms / 1000:.2f}-{r.utterance_end_ms / 1000:.2f} s, {r.language or '?'},"
                    f" confidence {r.confidence:.2f})",
                    flush=True,
                )
        except grpc.RpcError as e:
            fail(e)
    if not finals:
        print("no speech found")
        return 0
    print("\ntranscript: " + " ".join(r.transcript for _, r, _ in finals if r.transcript))
    if realtime:
        # Audio at offset X was sent at t0 + X, so these are what a live caller would wait.
        if first_interim:
            t, start_ms = first_interim
            print(f"first interim: {(t - start_ms / 1000) * 1000:.0f} ms after speech began")
        for t, r, end_event in finals:
            after_end = (t - r.utterance_end_ms / 1000) * 1000
            after_event = (
                f", {(t + sent['t0'] - end_event) * 1000:.0f} ms after the SPEECH_END event" if end_event else ""
            )
            print(f"final #{r.utterance_index}: {after_end:.0f} ms after speech ended (hangover included){after_event}")
    else:
        print("timings: run without --fast for latencies a live caller would see")
    return 0


# --- status ------------------------------------------------------------------------------------------------------
def cmd_status(args) -> int:
    from services.common.health_probe import health_status

    config = load_cli_config(args)
    address = router_address(args, config)
    router = health_status(address)
    print(f"{'router':<14} {address:<18} {router}")
    if router == "UNREACHABLE":
        print("router is down; asking each configured service directly:")
        for name, backend in config.router.backends.items():
            print(f"  {name:<12} {backend:<18} {health_status(backend)}")
        _print_members(config)
        return 1
    # Readiness per public service: SERVING while a backend for it is routable (docs/architecture.md#health).
    ready = {n: health_status(address, service=f"voice.v1.{n}") for n in ("Synthesizer", "Recognizer", "Conversation")}
    print(" " * 15 + "ready: " + ", ".join(f"{n} {status}" for n, status in ready.items()))
    with security.client_channel(address) as channel:
        try:
            reply = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=5)
        except grpc.RpcError as e:
            fail(e)
    ok = router == "SERVING"
    for b in reply.backends:
        health = fleet_pb2.BackendHealth.Name(b.health).removeprefix("BACKEND_HEALTH_")
        ok &= b.health == fleet_pb2.BACKEND_HEALTH_SERVING
        extra = f"  {b.consecutive_failures} consecutive failures" if b.consecutive_failures else ""
        if b.detail and b.detail != health:
            extra += f"  [{b.detail}]"  # ejected for how long, or recovering: probes passed so far
        if b.ejections:
            extra += f"  ejected {b.ejections}x since the router started"
        routed = "" if b.routable else "  (not routed to)"
        print(f"{b.name:<14} {b.address:<18} {health}{routed}{extra}")
    if reply.recent_failovers:
        print("\nrecent failovers (newest first):")
        for f in reply.recent_failovers[:10]:
            when = time.strftime("%H:%M:%S", time.localtime(f.at_unix_ms / 1000))
            request = f"  request {f.request_id}" if f.request_id else ""
            print(f"  {when}  {f.from_backend} -> {f.to_backend}  ({f.reason}){request}")
    if config.router.leases.authorities:  # several GPU nodes: each card's table, from its lease authority
        cards, problems = authority_addresses(config.router.leases.authorities)
        for problem in problems:
            print(f"\nGPU card: {problem}")
        for card in cards:
            with security.client_channel(card, token="") as channel:
                _print_leases(channel, config, f"GPU card {card}")
    else:
        with security.client_channel(address) as channel:
            _print_leases(channel, config)
    _print_models(config)
    _print_members(config)
    return 0 if ok else 1


def _print_models(config) -> None:
    """Where each model is, as its service measures it (ModelControl.GetModelStatus on each model service)."""
    metadata = [(security.FLEET_TOKEN_HEADER, config.security.fleet_token)] if config.security.fleet_token else []
    gib, rows = 1 << 30, []
    for name, address in config.router.backends.items():
        with security.client_channel(address, token="") as channel:
            try:
                s = (
                    gpu_pb2_grpc.ModelControlStub(channel)
                    .GetModelStatus(gpu_pb2.GetModelStatusRequest(), metadata=metadata, timeout=3)
                    .status
                )
            except grpc.RpcError as e:
                rows.append(f"  {name + ':':<15} ({e.code().name})")
                continue
        residency = gpu_pb2.Residency.Name(s.residency).removeprefix("RESIDENCY_")
        swap_in = f"{s.swap_in_ms} ms" if s.swap_ins else "-"
        swap_out = f"{s.swap_out_ms} ms" if s.swap_out_ms else "-"
        rows.append(
            f"  {name + ':':<15}{s.engine[:12]:<12} {s.device:<7} {residency:<10} {s.resident_bytes / gib:>9.2f}"
            f" {s.declared_bytes / gib:>9.2f} {swap_in:>9} {swap_out:>9} {s.swap_ins:>6} {s.active_streams:>7}"
        )
    print(
        f"\nmodels (ModelControl of each service):\n  {'service':<15}{'engine':<12} {'device':<7} {'residency':<10} {'held GiB':>9}"
        f" {'lease GiB':>9} {'swap-in':>9} {'swap-out':>9} {'loads':>6} {'streams':>7}"
    )
    print("\n".join(rows))


def _print_members(config) -> None:
    """What the supervisor of `voicefleet up` says of each member: state, uptime, restarts, memory, last exit."""
    from services.cli.supervisor import fetch_members

    members = fetch_members(config.fleet.supervisor_port)
    if members is None:
        print(f"\nsupervisor: none on 127.0.0.1:{config.fleet.supervisor_port} (fleet not started by `voicefleet up`?)")
        return
    mb = 1 << 20
    print(f"\n{'member':<14} {'state':<9} {'uptime':>8} {'restarts':>8} {'PSS MB':>7}  last exit")
    for m in members:
        uptime = f"{m['uptime_seconds']:.0f}s" if m["uptime_seconds"] is not None else "-"
        last = f"{m['last_exit']} {m['last_exit_seconds_ago']:.0f}s ago" if m["last_exit"] else "-"
        if m["restart_in_seconds"] is not None:
            last += f"; restarting in {m['restart_in_seconds']:.1f}s"
        pss = f"{m['pss_bytes'] / mb:.0f}" if m.get("pss_bytes") is not None else "-"
        print(f"{m['name']:<14} {m['state']:<9} {uptime:>8} {m['restarts']:>8} {pss:>7}  {last}")
    total = sum(m.get("pss_bytes") or 0 for m in members)
    print(f"{'the fleet':<14} {'':<9} {'':>8} {'':>8} {total / mb:>7.0f}  (PSS: shared pages counted once)")


def _print_leases(channel, config, title: str = "GPU card") -> None:
    """The GPU lease table (GpuLeases is fleet-only: the CLI sends the fleet token from the config when set)."""
    metadata = [(security.FLEET_TOKEN_HEADER, config.security.fleet_token)] if config.security.fleet_token else []
    try:
        table = gpu_pb2_grpc.GpuLeasesStub(channel).ListLeases(
            gpu_pb2.ListLeasesRequest(), metadata=metadata, timeout=5
        )
    except grpc.RpcError as e:
        print(f"\n{title}: lease table not shown ({e.code().name}: {e.details()})")
        return
    gib = 1 << 30
    print(f"\n{title}: {table.capacity_bytes / gib:.1f} GiB, {table.granted_bytes / gib:.1f} GiB granted")
    if table.leases:
        print(f"  {'holder':<14} {'model':<34} {'GiB':>5} {'epoch':>6} {'expires':>8}  state")
    for lease in table.leases:
        state = "revoking" if lease.revoking else ("busy" if lease.busy else "idle")
        print(
            f"  {lease.holder:<14} {lease.model[:34]:<34} {lease.bytes / gib:>5.1f} {lease.epoch:>6}"
            f" {lease.expires_in_ms / 1000:>7.1f}s  {state}"
        )
    for w in table.waiting:
        priority = gpu_pb2.LeasePriority.Name(w.priority).removeprefix("LEASE_PRIORITY_")
        print(f"  waiting: {w.holder} {w.bytes / gib:.1f} GiB ({priority})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="voicefleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="fleet config file (default: VOICEFLEET_CONFIG or the bundled default)")
    parser.add_argument("--router", help="router address host:port (default: router.host:router.port from config)")
    parser.add_argument(
        "--wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="wait up to this long for the router to be ready for the call (fleet still warming up) before calling;"
        " 0: call at once (default 5)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("up", help="start the local CPU fleet; Ctrl-C stops it").set_defaults(fn=cmd_up)

    speak = sub.add_parser("speak", help="synthesize text through the router into a WAV file")
    speak.add_argument("text")
    speak.add_argument("-o", "--output", default="out.wav", help="WAV file to write (default out.wav)")
    speak.add_argument("--voice", help="voice id (see ListVoices); default: the route's default voice")
    speak.add_argument("--rate", type=int, help="output sample rate in Hz, 8000..48000 (default: the voice's own)")
    speak.add_argument("--language", help="BCP-47 language, e.g. en-US")
    speak.add_argument("--speaking-rate", type=float, help="speed multiplier 0.5..2.0")
    speak.add_argument("--mode", choices=sorted(MODES), help="routing mode")
    speak.add_argument("--engine", help="pin a backend, e.g. cosyvoice_tts")
    speak.add_argument("--timeout", type=float, default=60.0, help="deadline in seconds (default 60)")
    speak.set_defaults(fn=cmd_speak)
    from services.cli.tts import add_tts_commands

    add_tts_commands(sub, speak)

    transcribe = sub.add_parser("transcribe", help="recognize speech in a WAV file through the router")
    transcribe.add_argument("input", help="16-bit PCM WAV, 8..48 kHz (stereo is mixed down)")
    transcribe.add_argument("--interim", action="store_true", help="print interim results as they change")
    transcribe.add_argument("--language", help="BCP-47, e.g. en-US (default: detect)")
    transcribe.add_argument("--hint", action="append", help="a phrase likely spoken (repeatable)")
    transcribe.add_argument(
        "--spot", action="append", help="a phrase to report as soon as it is heard, before the final (repeatable)"
    )
    transcribe.add_argument(
        "--hangover-ms",
        type=int,
        help=f"silence that ends an utterance (default: the asr service's, {ENDPOINTING['hangover_ms'].default})",
    )
    transcribe.add_argument(
        "--endpointing",
        choices=ENDPOINTING["mode"].choices,
        help="how an utterance ends: after the hangover, or when a turn model hears the speaker has finished"
        " (prints its judgements; default: the asr service's)",
    )
    transcribe.add_argument("--fast", action="store_true", help="send the file as fast as possible, not in real time")
    transcribe.add_argument("--timeout", type=float, help="deadline in seconds (default: 3x the audio + 60)")
    transcribe.set_defaults(fn=cmd_transcribe)

    from services.cli import converse

    converse.add_parser(sub, lambda a: router_address(a, load_cli_config(a)))

    sub.add_parser("status", help="health of the router and its backends").set_defaults(fn=cmd_status)

    args = parser.parse_args(argv)
    return args.fn(args)


def run() -> None:
    """The command line: ``main()``, then out at once. A streaming call refused at once (INVALID_ARGUMENT on its
    config) could leave gRPC's request thread behind, and the interpreter's exit then hung in gRPC's shutdown: the
    error printed, the process still there 90 s later (tests/asr/test_asr_e2e.py, twice in a full ``make test``).
    By then the command has closed its channels and files; nothing is left to clean up."""
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    run()
