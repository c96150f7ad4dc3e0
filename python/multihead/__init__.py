"""multihead: Transformer multi-head attention on the CPU.

    import multihead.torch   # fused attention for PyTorch: scaled_dot_product_attention,
                             # MultiheadAttention, accelerate(model)
"""

from ._multihead import __version__, machine, set_num_threads

__all__ = ["__version__", "machine", "set_num_threads"]
