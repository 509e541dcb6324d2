"""The model registry: a folder of ONNX files, their sidecar specs, and the bundled zoo."""
