"""Tests of the qwen_tts service (services/qwen_tts): espeak-ng on CPU, Qwen3-TTS and vLLM-Omni on GPU."""
