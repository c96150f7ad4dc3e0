# SPDX-License-Identifier: Apache-2.0
"""multihead: Transformer multi-head attention on the CPU.

    import multihead.torch   # fused attention for PyTorch: scaled_dot_product_attention,
                             # MultiheadAttention, accelerate(model)
    run = multihead.load_run("runs/spam")
    run.predict(["Win money now", "Meeting at 3"])   # [{'label': 'spam', 'probabilities': {...}}, ...]
    run.attention("Win money now")                   # tokens and (layers, heads, T, T) weights
    multihead.load_run("runs/moby-dick").generate("Call me", tokens=100)
    module = multihead.load_run("runs/spam").to_torch()  # a torch.nn.Module with the run's weights

The library's errors are multihead.Error (a ValueError) and its kinds ShapeError, ConfigError and
IoError; memory it cannot have is a MemoryError.
"""

from ._multihead import ConfigError, Error, IoError, ShapeError, Tokenizer, __version__, machine, set_num_threads
from .run import Run, load_run, save_state_dict, train

__all__ = ["ConfigError", "Error", "IoError", "Run", "ShapeError", "Tokenizer", "__version__", "load_run", "machine",
           "save_state_dict", "set_num_threads", "train"]
