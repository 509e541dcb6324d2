"""Turning measured sessions into findings: what limits a model, and what to do about it.

A session is judged against a hardware envelope (analysis.envelope_choice.session_envelope): the one
measured on this host for sessions measured here; for a trace ingested from a GPU, the envelope
measured on that GPU model if the TraceLake has one, else its datasheet (analysis.datasheets),
else none. Every node sits under the GEMM roof of its own data type.

Readers of the TraceLake: they may import the foundation, storage and the producers, never a
stage or a surface.
"""
