"""The model registry (producers): a folder of ONNX files, their sidecar specs, the bundled zoo.

May import the foundation, storage and the other producers.
"""
