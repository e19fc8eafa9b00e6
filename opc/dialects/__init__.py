"""Dialects of opc: the `opc` dialect (ops and grad ops on tensors)."""
