"""LLM text generation (producers): the decoder convention, the generation loop the measuring
process runs, and the load scenarios (single stream, server, offline) LoadGen drives.

May import the foundation, storage and the other producers.
"""
