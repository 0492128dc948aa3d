"""GPU time-sharing: who may hold card memory, and whether a model is on its card (docs/leases.md).

A layer between the shared runtime (services.common) and the fleet members: it imports only services.common and
voice.*; model services, the router and the CLI import it.

Vocabulary (one meaning each):

- **lease**: a grant of one card's bytes to a holder, with an epoch (fencing token), renewed or lost.
  ``lease_table`` (the card's table: who holds what, who waits, whom to revoke), ``lease_servicer`` (voice.v1.GpuLeases
  over that table), ``lease_client`` (the holder's side: acquire, renew, release).
- **holder**: a model service that holds (or waits for) a lease, named after the service.
- **lease authority**: the process that grants one card's leases: the router itself with one card, else one per card
  (``python -m services.residency``, config section ``lease_authority``; docs/scale.md).
- **residency**: whether one model's weights are on its device: COLD, LOADING, RESIDENT, OFFLOADING.
  ``model_residency`` (the state machine, holding a lease while RESIDENT), ``resident_engines`` (engines wrapped so
  each request holds the model resident), ``model_control`` (voice.v1.ModelControl: load, offload, status),
  ``from_config`` (all of it built from ``residency.*``).
- **offload / reload**: what an ``Offloadable`` engine (services/common/engines.py) does to free its device memory
  and take it back; ``torch_offload`` is that for torch engines, ``gpu_host`` checks the host's driver and caps a
  process's allocator at its lease.
- **placement**: the router's view of where each model is resident, read from the lease tables, to route around
  cold models (services/router/placement.py). Not part of this package.
"""
