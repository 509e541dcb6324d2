"""Running a model in isolation (producers): the measuring process, its parent-side runner,
the ONNX Runtime session both it and the LLM loop open, telemetry samplers, laboratory mode.

May import the foundation, storage and the other producers.
"""
