"""Integrations of kernelgen with other libraries (an application-level layer, beside ``apps``):
``kernelgen.integrations.transformers`` registers kernelgen as a Hugging Face transformers
attention implementation.  Importing this package imports nothing."""
