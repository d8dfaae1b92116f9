"""benchmarks/experiments/offline_sass.py's pure parts: loops from back-edges, op streams."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "offline_sass", Path(__file__).resolve().parents[1] / "benchmarks" / "experiments" / "offline_sass.py")
offline_sass = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(offline_sass)

SASS = """\
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   FMUL.FTZ R2, R2, R3 ;
        /*0020*/                   MUFU.TANH R2, R2 ;
        /*0030*/                   MUFU.TANH R4, R4 ;
        /*0040*/                   FMNMX.FTZ R5, R2, R4, !PT ;
        /*0050*/                   IMAD R6, R6, 0x2, RZ ;
        /*0060*/              @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0070*/                   EXIT ;
        /*0080*/              @!P1 BRA `(.L_x_3) ;
.L_x_3:
        /*0090*/                   BRA `(.L_x_1);
"""


def test_a_predicated_back_edge_is_a_loop_and_a_jump_back_from_the_tail_is_not():
    lines = SASS.splitlines()
    assert offline_sass.back_edges(lines) == [(0x10, 0x60)]


def test_the_stream_keeps_the_softmax_opcodes_and_runs_them_together():
    lines = SASS.splitlines()
    seq = offline_sass.ops(lines, 0x10, 0x60)
    assert seq == ["FMUL", "MUFU.TANH", "MUFU.TANH", "FMNMX", "IMAD", "BRA"]
    assert offline_sass.stream(seq) == "FMUL MUFU.TANHx2 FMNMX . BRA"
