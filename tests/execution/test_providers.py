"""Execution provider choice: the sidecar's, else the best this host can really run."""

from aaco_pipelines.execution.providers import amd_gpu_visible, choose_providers

ROCM_BUILD = ["ROCMExecutionProvider", "CPUExecutionProvider"]
MIGRAPHX_BUILD = ["MIGraphXExecutionProvider", "ROCMExecutionProvider", "CPUExecutionProvider"]


def test_sidecar_choice_wins():
    assert choose_providers(["CPUExecutionProvider"], MIGRAPHX_BUILD, True) == [
        "CPUExecutionProvider"
    ]


def test_automatic_choice_prefers_migraphx_then_rocm_on_a_gpu_host():
    assert choose_providers([], MIGRAPHX_BUILD, True) == [
        "MIGraphXExecutionProvider",
        "CPUExecutionProvider",
    ]
    assert choose_providers([], ROCM_BUILD, True) == [
        "ROCMExecutionProvider",
        "CPUExecutionProvider",
    ]


def test_no_gpu_means_cpu_even_when_the_rocm_build_lists_rocm(tmp_path):
    # onnxruntime-rocm lists ROCMExecutionProvider on any host and then falls back silently.
    assert choose_providers([], ROCM_BUILD, gpu_visible=False) == ["CPUExecutionProvider"]
    assert not amd_gpu_visible(tmp_path / "kfd")
    (tmp_path / "kfd").touch()
    assert amd_gpu_visible(tmp_path / "kfd")
