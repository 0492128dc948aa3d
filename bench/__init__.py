import os

# Before anything imports grpc: benchmarks fork fleet members while gRPC is busy (see services/cli/__init__.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
