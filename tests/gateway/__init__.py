"""Tests of the browser gateway (services/gateway): WebSocket, OpenAI endpoints, the page in headless Chromium."""
