"""opc inside other array frameworks: results as their arrays (`arrays`), PyTorch custom ops
(`opc.torch`, in torch.py) and JAX callables (`opc.jax`, in jax.py). Nothing here imports torch or
JAX until it is used, so `import opc` stays light."""
