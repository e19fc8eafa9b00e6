"""Loop-level IR, the C and CUDA emitters, and building and binding compiled modules."""
