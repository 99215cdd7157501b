"""Adapters for trainers (docs/trainers.md): one module per trainer, each
importing its trainer's package only when it is used, so the client keeps no
hard dependency on any of them."""
