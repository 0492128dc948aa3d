"""Tests of the brain (services/brain): llama.cpp + SmolLM2, its prompt cache, concurrency, the portable build."""
