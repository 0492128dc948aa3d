"""Remote engines: gRPC clients of a backend that implement the engine interfaces (services/common/engines.py), so a
process calls a model in another process as it calls one in its own. Below the router and the model services:
imports only the contracts (voice.*) and the shared runtime (services.common)."""
