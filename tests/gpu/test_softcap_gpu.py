"""GPU: the hardware tanh that the built-in soft-cap takes (tanh.approx.f32, templates/common/softmax.cuh)
against float64 over every float32 argument, so the error bound the float64 reference derives from
(``reference.TANH_APPROX_REL_ERR``, the PTX ISA's 2^-11) is checked on the device the tests run on.

Normal arguments: relative error at most the bound; subnormal ones (|x| < 2^-126, where tanh x = x
to float precision): absolute error at most 2^-126, which moves no capped logit by anything the
bounds can see; 0 and -0 map to themselves (+-inf and the saturated range are normal arguments:
+-1 within the bound).  The largest relative error is printed."""
import math

import numpy as np
import pytest
import torch

from kernelgen.apps.reference import TANH_APPROX_REL_ERR

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (7, 5),
                                 reason="needs a CUDA GPU of compute capability 7.5 or newer (MUFU.TANH)")]

_SOURCE = r"""
// worst: the largest relative error's float bits (non-negative: ordered as integers) in the high
// word, its argument's bits in the low word, so one 64-bit atomicMax keeps the pair together
extern "C" __global__ void sweep(unsigned long long start, unsigned long long count, unsigned long long* worst,
                                 unsigned int* bad_sub) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned int bits = (unsigned int)(start + i);
    const float x = __uint_as_float(bits);
    if (x != x) continue;                                         // NaN
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
    const double ref = tanh((double)x);
    const double ax = fabs((double)x);
    if (ax < 1.1754943508222875e-38) {                            // subnormal or zero: absolute
      if (fabs((double)t - ref) > 1.1754943508222875e-38 || (x == 0.f && __float_as_uint(t) != bits))
        atomicAdd(bad_sub, 1u);
      continue;
    }
    const float rel = (float)(fabs((double)t - ref) / fabs(ref));  // rounded: compared with a margin
    atomicMax(worst, ((unsigned long long)__float_as_uint(rel) << 32) | bits);
  }
}
"""


def test_tanh_approx_is_within_the_bound_the_reference_takes(record_property):
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(torch.cuda.current_device()):
        kern = cupy.RawKernel(_SOURCE, "sweep")
        worst = cupy.zeros(1, dtype=cupy.uint64)
        bad = cupy.zeros(1, dtype=cupy.uint32)
        chunk = 1 << 30
        for start in range(0, 1 << 32, chunk):                   # every float32 bit pattern
            kern((132 * 16,), (256,), (cupy.uint64(start), cupy.uint64(chunk), worst, bad))
        cupy.cuda.Device().synchronize()
        packed = int(cupy.asnumpy(worst)[0])
        rel, x = (float(np.array([packed >> 32, packed & 0xFFFFFFFF], dtype=np.uint32).view(np.float32)[i])
                  for i in (0, 1))
        n_bad = int(cupy.asnumpy(bad)[0])
    print(f"tanh.approx.f32: largest relative error {rel:.4e} (2^{math.log2(rel):.2f}) at x = {x!r}; "
          f"bound taken {TANH_APPROX_REL_ERR:.4e}")
    record_property("tanh_approx_max_rel_err", rel)                 # in junit.xml
    record_property("tanh_approx_max_rel_err_at", x)
    assert n_bad == 0, f"{n_bad} subnormal or zero arguments beyond 2^-126 absolute (or a zero's sign lost)"
    assert 0.0 < rel <= TANH_APPROX_REL_ERR * (1 + 2.0 ** -20), (rel, x)
