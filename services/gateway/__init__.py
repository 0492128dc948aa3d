"""The gateway: the fleet's browser and HTTP front door (docs/gateway.md)."""
