"""Tests of the cosyvoice_tts service (services/cosyvoice_tts): piper on CPU, CosyVoice3 on GPU, RegisterVoice, speak end to end."""
