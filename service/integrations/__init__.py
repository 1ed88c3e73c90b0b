"""Drop-ins that let other tools use tunehub; each reaches the service only through
:mod:`service.client` (and :mod:`service.schemas`): :mod:`service.integrations.triton` (Triton
autotune backed by tunehub), :mod:`service.integrations.torch` (tuned kernels as PyTorch ops)."""
