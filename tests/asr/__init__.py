"""Tests of the asr service (services/asr): VAD, recognizers, semantic end of turn, accuracy, bad input, GPU engine."""
