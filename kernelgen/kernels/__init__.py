"""What a kernel is: the vocabulary every layer shares (the lowest layer; imports no other).

``spec`` (frozen kernel variants, their names and template variables), ``params`` (the parameter
structs' ABI), ``metadata`` (the scheduler-metadata ABI and its host reference), ``kernel_args``
(parameter values and launch shapes from tensors), ``tma`` (TMA tensor maps), ``workspace``
(byte layouts of a call's scratch memory), ``device`` (a CUDA device's description) and
``recipe`` (what one call launches, made by ``selection`` and consumed by ``launch``).
"""
