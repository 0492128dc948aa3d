"""The ``voicefleet`` CLI and the local fleet it starts and supervises."""

import os

# This package forks fleet members (LocalFleet.spawn, with a preexec_fn, so a real fork) while gRPC runs in other
# threads (health checks, the supervisor). gRPC's fork handlers then restart its pollers in the child before it execs,
# and the child can abort ("epoll_wait error: Bad file descriptor", exit -6: seen in tests). The children exec at
# once and never use the parent's gRPC, so the handlers are not needed. gRPC reads this when it is first imported:
# set it before that (tests/__init__.py does the same for the test process, bench/__init__.py for benchmarks).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
