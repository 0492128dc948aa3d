"""The asr engines: Silero VAD endpointing, pocketsphinx + whisper on CPU, faster-whisper on GPU, the turn model."""
