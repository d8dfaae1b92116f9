"""benchmarks/experiments/sass_regions.py on a synthetic ncu source export: the consumer / producer
split at the consumers' EXIT, the loop body, per-tile and spin regions by execution count, and the
comparison in fractions of the peer's consumer samples."""
import csv
import gzip
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "experiments"))
import sass_regions as SR  # noqa: E402

HDR = ["Address", "Source", SR.SAMPLES, "Instructions Executed", "stall_barrier", "stall_wait"]


def _export(path, loop_samples, tile_samples, spin=0):
    """300 loop instructions run 1000 times, 400 per-tile ones run 40 times, an optional spin pair,
    the consumers' EXIT, then a producer with one TMA load."""
    rows = [["Kernel Name", "k"], HDR]
    for i in range(400):
        rows.append([hex(i), "IMAD R1, R2, R3, RZ", str(tile_samples / 400), "40", "0", str(tile_samples / 400)])
    for i in range(300):
        rows.append([hex(1000 + i), "HGMMA.64x128x16.F32", str(loop_samples / 300), "1000",
                     str(loop_samples / 300), "0"])
    if spin:
        rows.append(["0x9000", "@!P0 BRA 0x9000", str(spin), "90000", "0", str(spin)])
    rows += [["0xa000", "EXIT", "1", "8", "0", "0"], ["0xa010", "UTMALDG.2D [UR8], [UR4]", "5", "40", "0", "0"],
             ["0xa020", "@!P0 BRA 0xa010", "50", "800", "0", "0"]]
    with gzip.open(path, "wt", newline="") as f:
        csv.writer(f).writerows(rows)


def test_regions_and_comparison(tmp_path):
    _export(tmp_path / "kernelgen_s_sass.csv.gz", loop_samples=900, tile_samples=200, spin=30)
    _export(tmp_path / "fa3_s_sass.csv.gz", loop_samples=900, tile_samples=100)
    kg = SR.regions(*SR.load(tmp_path / "kernelgen_s_sass.csv.gz"))
    assert kg["loop_executions"] == 1000 and kg["tile_executions"] == 40
    assert kg["regions"]["block"]["samples"] == pytest.approx(900)
    assert kg["regions"]["tile"]["samples"] == pytest.approx(200 + 1)   # the EXIT runs once a warp: per tile
    assert kg["regions"]["spin"]["samples"] == pytest.approx(30)
    assert kg["producer_samples"] == pytest.approx(55)
    assert kg["regions"]["block"]["stalls"]["barrier"] == pytest.approx(900)
    c = SR.compare(kg, SR.regions(*SR.load(tmp_path / "fa3_s_sass.csv.gz")))
    assert c["consumer_samples_ratio"] == pytest.approx(1131 / 1001, abs=1e-4)
    assert c["tile"]["delta"] == pytest.approx(100 / 1001, abs=1e-4)
    assert c["block"]["delta"] == 0 and c["spin"]["delta"] == pytest.approx(30 / 1001, abs=1e-4)
    assert SR.main([str(tmp_path), "--shapes", "s", "--json", str(tmp_path / "o.json")]) == 0
    assert (tmp_path / "o.json").exists()


def test_a_kernel_without_warp_specialisation_is_refused(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("\n".join(",".join(f'"{x}"' for x in r) for r in
                           [["Kernel Name", "k"], HDR, ["0x0", "FFMA R1, R2, R3, R4", "3", "10", "0", "0"],
                            ["0x10", "EXIT", "1", "1", "0", "0"]]) + "\n")
    hdr, data = SR.load(p)
    # no TMA load: the whole kernel counts as the consumer, the last EXIT ends it
    assert SR.consumer_end(data) == 1
    p.write_text("\n".join(",".join(f'"{x}"' for x in r) for r in
                           [["Kernel Name", "k"], HDR, ["0x0", "UTMALDG.2D [UR8], [UR4]", "3", "10", "0", "0"],
                            ["0x10", "EXIT", "1", "1", "0", "0"]]) + "\n")
    with pytest.raises(ValueError, match="EXIT before the first TMA load"):
        SR.consumer_end(SR.load(p)[1])
