"""Fleet member ``brain``: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct (CPU), the reply
model of the cascade (moss_sts's CPU engine and the router's Conversation fallback reach it over HTTP)."""
