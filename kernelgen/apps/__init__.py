"""Applications on top of the public calls: the ``kernelgen`` command line (``cli``), the demo,
the benchmark (``bench``), the layout comparison, request-length traces (``traces``, sample data
in ``data/``), CUDA-event timing (``timing``) and the float64 reference (``reference``) that
tests, the demo, the benchmark and the fuzzer check against.
"""
