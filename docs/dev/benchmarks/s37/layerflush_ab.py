"""decode_ab.py with the L2 "flush" replaced by what precedes attention in a real decode layer:
the previous layer's MLP down projection, then this layer's QKV projection (bf16 GEMMs on
LAYER_TOKENS tokens; weights read once, small outputs written).  LAYER=8b (hidden 4096,
intermediate 14336, 32 / 8 heads: W_down 117 MB, W_qkv 50 MB) or tp8 (llama3-70b on 8 GPUs:
hidden 8192, intermediate 3584, 8 / 1 heads: 59 + 21 MB).  Outside the timed events, like the
bench's flush."""
import os, sys, runpy
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from kernelgen.apps.bench import measure

SHAPES = {"8b": (4096, 14336, 6144), "tp8": (8192, 3584, 1280)}
hidden, inter, qkv = SHAPES[os.environ.get("LAYER", "8b")]
tokens = int(os.environ.get("LAYER_TOKENS", "128"))

class LayerFlush:
    def __init__(self):
        d = dict(device="cuda", dtype=torch.bfloat16)
        self.h = torch.randn(tokens, inter, **d)
        self.w_down = torch.randn(inter, hidden, **d) * 0.01
        self.x = torch.empty(tokens, hidden, **d)
        self.w_qkv = torch.randn(hidden, qkv, **d) * 0.01
        self.q = torch.empty(tokens, qkv, **d)
    def zero_(self):
        torch.mm(self.h, self.w_down, out=self.x)
        torch.mm(self.x, self.w_qkv, out=self.q)

_lf = None
def flush_buffer():
    global _lf
    if _lf is None:
        _lf = LayerFlush()
    return _lf
measure.flush_buffer = flush_buffer
measure.flush_l2 = lambda buf, mode: buf.zero_()
sys.argv = [str(Path(__file__).resolve().parents[1] / "benchmarks/experiments/decode_ab.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
