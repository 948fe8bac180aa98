"""Tessera: one training job across accelerators of several vendors.

`import tessera.torch` registers the torch.distributed backend "tessera" (docs/torch.md).
"""
