"""``kernelgen.Variant`` (user attention variants compiled at run time): the public name of
``kernelgen.selection.variant.Variant``, where the class, its checks and the full description of
the snippets' scope live (the selection layer validates a call's ``variant`` argument, so the class
sits there; ``kernelgen.Variant`` is this module's ``Variant``)."""
from ..selection.variant import TORCH_DTYPES, Variant, check

__all__ = ["Variant", "TORCH_DTYPES", "check"]
