"""Every metric voicefleet exports, defined once. Dashboards and alert rules refer to these names.

Labels: ``service`` (router, cosyvoice_tts, ...), ``engine`` (piper, remote:cosyvoice_tts, ...), ``method`` (the
RPC), ``code`` (the gRPC status name). Latency buckets resolve 10 ms .. 2 s and go on to 10 s for slow paths.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 5.0)

REQUESTS = Counter(
    "voicefleet_requests_total", "Finished RPCs by final gRPC status code.", ["service", "method", "code"]
)
MALFORMED_MESSAGES = Counter(
    "voicefleet_malformed_messages_total",
    "Request messages that did not parse as their protobuf type (answered INVALID_ARGUMENT).",
    ["service", "method"],
)
DEEP_PROBES = Counter(
    "voicefleet_deep_probes_total",
    "A service's own deep probes (a tiny real request through its engine while idle): outcome ok, failed or skipped.",
    ["service", "outcome"],
)
ACTIVE_STREAMS = Gauge("voicefleet_active_streams", "RPCs being served now.", ["service", "method"])
QUEUE_WAIT = Histogram(
    "voicefleet_queue_wait_seconds",
    "Time a request waited for an engine slot.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
SCHEDULER_WAIT = Histogram(
    "voicefleet_scheduler_wait_seconds",
    "Time a synthesis segment waited for an engine worker, by segment: first (of its stream) or next (continuation).",
    ["service", "engine", "segment"],
    buckets=LATENCY_BUCKETS,
)
SCHEDULER_LATE = Counter(
    "voicefleet_scheduler_late_segments_total",
    "Continuation segments that got a worker after their stream's audio had run out (the listener heard a gap).",
    ["service", "engine"],
)
SCHEDULER_WORKERS = Gauge(
    "voicefleet_scheduler_workers", "Segments an engine synthesizes at once.", ["service", "engine"]
)
ADMISSION_REJECTIONS = Counter(
    "voicefleet_admission_rejections_total",
    "New streams refused with RESOURCE_EXHAUSTED, by why: streams or sessions (at capacity), first_wait (predicted"
    " wait for its first audio over budget), behind (an admitted stream's continuation late).",
    ["service", "reason"],
)
ADMISSION_CAPACITY = Gauge(
    "voicefleet_admission_capacity_streams",
    "Streams (or conversations) a service admits at once, by the config field that sets it.",
    ["service", "limit"],
)

# Text to speech.
TTS_TTFA = Histogram(
    "voicefleet_tts_time_to_first_audio_seconds",
    "Request received to first audio chunk sent to the caller.",
    ["service", "engine", "method"],
    buckets=LATENCY_BUCKETS,
)
TTS_ENGINE_FIRST_CHUNK = Histogram(
    "voicefleet_tts_engine_first_chunk_seconds",
    "Engine started to engine's first audio piece (excludes queueing and transport).",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
TTS_RTF = Histogram(
    "voicefleet_tts_real_time_factor",
    "Synthesis wall time divided by audio duration, per completed request.",
    ["service", "engine"],
    buckets=RTF_BUCKETS,
)
TTS_AUDIO_SECONDS = Counter(
    "voicefleet_tts_audio_seconds_total", "Seconds of audio produced by engines.", ["service", "engine"]
)
TTS_SEGMENT_CACHE = Counter(
    "voicefleet_tts_segment_cache_total",
    "Streams' first segments looked up in the engine's segment cache (scheduling.segment_cache_mb): hit (its audio"
    " reused, no synthesis) or miss (synthesized, then kept).",
    ["service", "engine", "outcome"],
)
TTS_SEGMENT_CACHE_BYTES = Gauge(
    "voicefleet_tts_segment_cache_bytes", "Audio bytes the segment cache holds now.", ["service", "engine"]
)
ENGINE_STEPS = Counter(
    "voicefleet_engine_steps_total",
    "Engine work units done (a sentence for piper). Stops growing when a cancelled stream stops its engine.",
    ["service", "engine"],
)
TTS_CANCEL_TO_STOP = Histogram(
    "voicefleet_tts_cancel_to_engine_stop_seconds",
    "Caller cancelled to the engine's last step finishing.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)

# Speech to text (asr; the router's remote engine reports the same names under service="router").
VAD_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.032)
ASR_FIRST_INTERIM = Histogram(
    "voicefleet_asr_speech_start_to_first_interim_seconds",
    "VAD speech start detected to the utterance's first interim result sent (wall time).",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
ASR_ENDPOINT_LATENCY = Histogram(
    "voicefleet_asr_speech_end_to_final_seconds",
    "Endpoint latency: VAD speech end detected (after the hangover) to the utterance's final result sent.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
ASR_RTF = Histogram(
    "voicefleet_asr_real_time_factor",
    "Recognition compute time divided by the audio it covered, per final (pass=final) or per partial look "
    "(pass=interim, per utterance).",
    ["service", "engine", "pass"],
    buckets=RTF_BUCKETS,
)
ASR_VAD_WINDOW = Histogram(
    "voicefleet_asr_vad_window_seconds",
    "Silero VAD compute per 32 ms window (512 samples at 16 kHz).",
    ["service"],
    buckets=VAD_BUCKETS,
)
ASR_OPEN_DECODERS = Gauge(
    "voicefleet_asr_open_decoders",
    "Recognition streams holding decoder state now; back to 0 when every stream has ended or been cancelled.",
    ["service", "engine"],
)
ASR_INTERIMS_SKIPPED = Counter(
    "voicefleet_asr_interims_skipped_total",
    "Utterances recognized without interim results because the engine's interim budget (asr.max_concurrent_interims)"
    " was spent when they started; their finals are unaffected.",
    ["service", "engine"],
)
ASR_SPOTTING_SKIPPED = Counter(
    "voicefleet_asr_spotting_skipped_total",
    "Utterances of streams that asked for spot phrases whose start found the engine's spotting budget"
    " (asr.max_concurrent_spotting) spent: no early PhraseSpotted for them; their interims and finals are unaffected.",
    ["service", "engine"],
)
ASR_SPOT_DECODES = Histogram(
    "voicefleet_asr_spot_decode_seconds",
    "Compute time of one spotting decode (the young utterance so far re-decoded by the final recognizer, for"
    " RecognitionConfig.spot_phrases); its count is the number of such decodes.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
ASR_DRAFTS_SKIPPED = Counter(
    "voicefleet_asr_drafts_skipped_total",
    "Draft decodes (RecognitionConfig.draft_interval_ms) put off because the engine's draft budget"
    " (asr.max_concurrent_drafts) was in flight; the draft is tried again at the next window.",
    ["service", "engine"],
)
ASR_DRAFT_DECODES = Histogram(
    "voicefleet_asr_draft_decode_seconds",
    "Compute time of one draft decode (the utterance so far re-decoded by the final recognizer while it is spoken,"
    " for RecognitionConfig.draft_interval_ms); its count is the number of drafts decoded.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
ASR_PHRASES_SPOTTED = Counter(
    "voicefleet_asr_phrases_spotted_total",
    "PhraseSpotted events sent: a spot phrase heard in a young utterance before its final.",
    ["service", "engine"],
)
ASR_AUDIO_SECONDS = Counter(
    "voicefleet_asr_audio_seconds_total", "Seconds of audio taken in by recognition streams.", ["service", "engine"]
)
ASR_UTTERANCES = Counter(
    "voicefleet_asr_utterances_total",
    "Finals sent, by why the utterance ended: endpoint (hangover), max_utterance, end_of_stream; semantic "
    "endpointing: turn_complete (the turn model said complete), sentence_end (it did not, but the words read as a "
    "finished sentence: after sentence_end_silence_ms), max_silence (it did not, and the silence lasted).",
    ["service", "engine", "reason"],
)
ASR_TURN_MODEL = Histogram(
    "voicefleet_asr_turn_model_seconds",
    "Turn model (Smart Turn v3.2) compute per judgement: features + inference on the last 8 s of audio.",
    ["service"],
    buckets=LATENCY_BUCKETS,
)
ASR_SPECULATIVE_FINALS = Counter(
    "voicefleet_asr_speculative_finals_total",
    "Speculative final decodes (pass 2 started in a pause before the utterance ended), by outcome: used (it became the"
    " final) or dropped (sound came back, or the pause ended elsewhere: its CPU was spent for nothing).",
    ["service", "engine", "outcome"],
)
ASR_TURN_JUDGEMENTS = Counter(
    "voicefleet_asr_turn_judgements_total",
    "Turn model judgements at pauses (semantic endpointing), by outcome: complete, incomplete, or vetoed (the model"
    " said complete, the text so far ends with a word that does not end a sentence: the turn stays open).",
    ["service", "engine", "outcome"],
)

# Conversation (moss_sts; the router reports the backend's turn timings under service="router").
STS_FIRST_AUDIO = Histogram(
    "voicefleet_sts_speech_end_to_first_audio_seconds",
    "The headline: end of the user's speech (when its audio arrived) to the first reply audio sent.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
STS_BARGE_IN_TO_SILENCE = Histogram(
    "voicefleet_sts_barge_in_to_silence_seconds",
    "Barge-in detected (user speech passed the minimum while the agent spoke) to the last reply audio sent.",
    ["service", "engine"],
    buckets=LATENCY_BUCKETS,
)
STS_TURNS = Counter(
    "voicefleet_sts_turns_total",
    "Conversation turns by outcome: complete, interrupted, error.",
    ["service", "engine", "outcome"],
)
STS_INTERRUPTIONS = Counter(
    "voicefleet_sts_interruptions_total",
    "Replies cut short, by reason: barge_in (user speech), client (ACTION_INTERRUPT).",
    ["service", "engine", "reason"],
)
STS_END_OF_TURN = Counter(
    "voicefleet_sts_end_of_turn_decisions_total",
    "The turn model's judgements of a pause in the user's speech (semantic endpointing): complete, incomplete,"
    " vetoed (the model said complete, the words before the pause do not end a sentence), or sentence_end (it said"
    " incomplete, the words read as a finished sentence: the turn ends after sentence_end_silence_ms).",
    ["service", "engine", "decision"],
)
STS_WORDS_JUDGEMENTS = Counter(
    "voicefleet_sts_words_judgements_total",
    "The reply model's reading of the user's words at a candidate end of turn (moss_sts.brain_turn_check):"
    " finished, unfinished (the turn waits for more speech up to max_silence_ms), unknown (no answer) or late (the"
    " commit went on without it).",
    ["service", "engine", "verdict"],
)
STS_PREEMPTIVE_REPLIES = Counter(
    "voicefleet_sts_preemptive_replies_total",
    "Replies started at a candidate end of turn, held until the commit: used (the turn committed) or discarded"
    " (the user went on; nothing of it was sent).",
    ["service", "engine", "outcome"],
)
STS_FUNCTION_CALLS = Counter(
    "voicefleet_sts_function_calls_total",
    "The agent's calls of the caller's functions (docs/conversation.md#tools): called, answered (the output came),"
    " or cancelled: timeout, barge_in, client.",
    ["service", "engine", "outcome"],
)
STS_BRAIN_TURN_JUDGEMENT = Histogram(
    "voicefleet_sts_brain_turn_judgement_seconds",
    "The reply model's reading of the user's words at a candidate end of turn (ChatBrain.end_of_turn_logprob):"
    " request to answer.",
    ["service"],
    buckets=LATENCY_BUCKETS,
)
STS_BRAIN_READ_AHEADS = Counter(
    "voicefleet_sts_brain_read_aheads_total",
    "The user's words so far (a recognizer draft, while they speak) sent to the brain ahead of the turn"
    " (moss_sts.brain_read_ahead_ms): done (the brain evaluated them), skipped (the brain was busy with another"
    " request of the process) or failed (the turn evaluates them itself).",
    ["service", "engine", "outcome"],
)
STS_BARGE_IN_DECISIONS = Counter(
    "voicefleet_sts_barge_in_total",
    "Barge-ins by what decided them: stop_word (in an interim), stop_word_spotted (spotted early by the recognizer,"
    " RecognitionConfig.spot_phrases), stop_word_final (in the final of speech that had ended), words (enough"
    " non-backchannel words), long_speech (speech lasting barge_in_unheard_ms).",
    ["service", "engine", "why"],
)
STS_BARGE_IN_REFUSED = Counter(
    "voicefleet_sts_barge_in_refused_total",
    "Speech over the reply that did not interrupt it, by why: backchannel (only backchannel words), short_speech (it"
    " ended before its interims held enough words, and its final no stop word), own_words (the reply's own words"
    " heard back: echo).",
    ["service", "engine", "why"],
)
STS_BRAIN_WAIT = Histogram(
    "voicefleet_sts_brain_wait_seconds",
    "A brain request's wait for one of the brain's places (brain.parallel_requests), by kind: turn (a committed"
    " turn's reply), judgement (the reading of the user's words at a pause), held (a reply started before the commit),"
    " read_ahead (never waits: skipped when the brain is busy). Turns go first (services/conversation/brain_queue.py).",
    ["service", "kind"],
    buckets=LATENCY_BUCKETS,
)
STS_BRAIN_HELD = Histogram(
    "voicefleet_sts_brain_held_seconds",
    "How long a brain request held its place, by kind (as voicefleet_sts_brain_wait_seconds): what each kind of"
    " request costs the others.",
    ["service", "kind"],
    buckets=LATENCY_BUCKETS,
)
FOREIGN_REPLIES = Counter(
    "voicefleet_sts_foreign_replies_total",
    "Replies whose text the language guard found in a language the session's voice does not speak"
    " (services/conversation/reply_language.py), by language and what was done: retried (nothing said yet, asked"
    " again), cut (the reply ended at the text already said), failed (foreign twice: the turn failed).",
    ["service", "language", "action"],
)
STS_BRAIN_FIRST_TOKEN = Histogram(
    "voicefleet_sts_brain_first_token_seconds",
    "Chat request sent to the brain (OpenAI-compatible) to its first streamed text.",
    ["service"],
    buckets=LATENCY_BUCKETS,
)

# Router.
LEASE_EVENTS = Counter(
    "voicefleet_gpu_lease_events_total",
    "GPU lease grants, revocations, releases and expiries, by holder service.",
    ["event", "holder"],
)
SWAP_SECONDS = Histogram(
    "voicefleet_model_swap_seconds",
    "Time to put a model on its device (in: lease wait + load) or take it off (out).",
    ["service", "direction"],
    buckets=LATENCY_BUCKETS,
)
PREFETCHES = Counter(
    "voicefleet_model_prefetches_total",
    "Models the router asked to load because a request found them cold.",
    ["backend"],
)
LEASE_GRANTED_BYTES = Gauge("voicefleet_gpu_lease_granted_bytes", "GPU bytes granted to lease holders now.")
LEASE_HOLDER_BYTES = Gauge(
    "voicefleet_gpu_lease_holder_bytes", "GPU bytes granted to each holder now (0 once its lease ended).", ["holder"]
)
LEASE_WAITERS = Gauge("voicefleet_gpu_lease_waiters", "Lease requests waiting for room on the card now.")
BACKEND_UP = Gauge("voicefleet_backend_serving", "1 when a backend's health says SERVING.", ["backend"])
BACKEND_ROUTABLE = Gauge(
    "voicefleet_router_backend_routable",
    "1 when the router routes to a backend: SERVING, not ejected, recovered (docs/router.md#health).",
    ["backend"],
)
BACKEND_EJECTIONS = Counter(
    "voicefleet_router_ejections_total",
    "Backends ejected by outlier detection, by why: failures (calls), no_audio (first-audio timeouts), probe (a"
    " recovery probe failed), deep_probe (a deep probe failed).",
    ["backend", "reason"],
)
ROUTER_PROBES = Counter(
    "voicefleet_router_probes_total",
    "Real tiny requests the router sent to check a backend: kind recovery or deep; outcome ok or failed.",
    ["backend", "kind", "outcome"],
)
# Router relay per chunk: 50 us .. 10 ms (the goal is p50 <= 0.5 ms, p99 <= 2 ms).
RELAY_BUCKETS = (5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 4e-4, 5e-4, 7.5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 1e-2)
ROUTER_RELAY = Histogram(
    "voicefleet_router_chunk_relay_seconds",
    "Router time per audio chunk: the backend's chunk received (decoded) to the caller's chunk written, excluding"
    " gRPC's own receive path.",
    ["method"],
    buckets=RELAY_BUCKETS,
)
FAILOVERS = Counter(
    "voicefleet_router_failovers_total",
    "Requests (or conversation turns) moved from one backend to another, by why: unavailable, deadline, internal,"
    " resource_exhausted, no_audio (first-audio timeout), unhealthy (skipped: ejected or down), recovered (back),"
    " tools (moss_sts calls no tools, so a conversation with tools went to the cascade).",
    ["from", "to", "reason"],
)

# The gateway (services/gateway): the browser and HTTP front door. ``endpoint``: conversation (the WebSocket),
# speech, transcriptions, voices; ``outcome``: an HTTP status ("200", "400", ...) or a WebSocket close code ("1000",
# "4003", ...).
GATEWAY_SESSIONS = Gauge("voicefleet_gateway_sessions", "Conversation WebSockets open now.")
GATEWAY_REQUESTS = Counter(
    "voicefleet_gateway_requests_total",
    "Finished gateway requests and WebSocket sessions, by endpoint and outcome (HTTP status or close code).",
    ["endpoint", "outcome"],
)
GATEWAY_MESSAGES = Counter(
    "voicefleet_gateway_messages_total",
    "WebSocket messages, by direction (in: from the client, out: to it) and kind (audio, event, control, config).",
    ["direction", "kind"],
)
GATEWAY_BYTES = Counter(
    "voicefleet_gateway_bytes_total",
    "Audio bytes through the gateway, by direction (in: from clients, out: to them) and endpoint.",
    ["direction", "endpoint"],
)
GATEWAY_REFUSALS = Counter(
    "voicefleet_gateway_refusals_total",
    "Requests and sessions the gateway refused or closed on its own, by reason: origin, unauthenticated, max_sessions,"
    " max_client_secrets, bad_input, idle, too_big, slow_client.",
    ["reason"],
)
GATEWAY_DROPPED = Counter(
    "voicefleet_gateway_dropped_messages_total",
    "Messages to a slow client dropped because its send queue was full (interim transcripts only; anything else"
    " closes the session, counted as a refusal slow_client).",
    ["kind"],
)
GATEWAY_ADDED = Histogram(
    "voicefleet_gateway_added_seconds",
    "Time the gateway itself adds: speech: request received to first audio written, less the router's own time to"
    " its first chunk; conversation: a reply audio chunk received from the router to written to the socket.",
    ["endpoint"],
    buckets=RELAY_BUCKETS,
)

# The local supervisor (`voicefleet up`): served on fleet.supervisor_port, label ``member`` = the fleet member.
SUPERVISOR_RESTARTS = Counter(
    "voicefleet_supervisor_restarts_total",
    "Fleet members started again after an unexpected exit (crash, kill, non-zero exit).",
    ["member"],
)
SUPERVISOR_MEMBER_READY = Gauge(
    "voicefleet_supervisor_member_ready", "1 while the member's process runs and reports ready.", ["member"]
)
SUPERVISOR_GAVE_UP = Gauge(
    "voicefleet_supervisor_member_gave_up", "1 when the member crash-looped and is no longer restarted.", ["member"]
)


def start_metrics_server(port: int, host: str = "127.0.0.1") -> None:
    """Serve /metrics (Prometheus text format) from a background thread."""
    if port:
        start_http_server(port, addr=host)
