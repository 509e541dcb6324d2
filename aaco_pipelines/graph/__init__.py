"""The model's graph (producers): what it computes, how to feed it, what each node should cost.

Extraction is content-addressed by the model's sha256, so one model file is read once and its
nodes and edges are shared by every session that runs it. May import the foundation, storage
and the other producers.
"""
