"""Local engines that more than one deployable runs in process: the asr CPU and GPU engines (Silero VAD, pocketsphinx,
faster-whisper, the Smart Turn model), piper and espeak-ng.

Below the model services: the asr service serves engines.asr, cosyvoice_tts serves piper, qwen_tts serves espeak, and
moss_sts's cascade in a box speaks with piper or espeak (and listens with engines.asr when moss_sts.asr is local)
without importing another service. Engines of one deployable only (CosyVoice3, Qwen3-TTS, vLLM-Omni, MOSS-Speech)
stay in that service's folder. Imports only the shared runtime (services.common) and the residency layer.
"""
