"""Kernel families against every kernel name of the real profiler samples in shared/samples."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from aaco_pipelines.collectors.kernel_families import (
    FAMILIES,
    PATTERNS,
    family_table_markdown,
    kernel_families,
    kernel_family,
)
from tests.helpers import SHARED

SAMPLES = SHARED / "samples" / "profilers"

# Names that are legitimately "other": no family describes the work they do.
OTHER_ALLOWED = {
    # HIP finite-difference stencil of the MI250 training example: HPC, not an ML operator.
    r"^laplacian_kernel$": "stencil of a non-ML HPC example",
    # The same example's setup and verification kernels.
    r"^test_function_kernel$": "initializes the example's input",
    r"^check_kernel$": "verifies the example's result",
    # rocPRIM sorts and stream compaction (torch.sort, unique, nonzero): no sorting family.
    r"rocprim.*(sort|merge|onesweep|partition)": "sorting / partitioning",
    # PyTorch device-side asserts: launched for checks, they do no tensor work.
    r"_assert_async_cuda_kernel": "device-side assert",
    # HIP runtime housekeeping: device heap setup and stream wait/write-value packets.
    r"^__amd_rocclr_(initHeap|streamOpsWait|streamOpsWrite|batchMemOp)": "runtime bookkeeping",
}


def _csv_names(name: str, column: str) -> list[str]:
    with open(SAMPLES / name, newline="") as handle:
        return [row[column] for row in csv.DictReader(handle)]


def _rocprofv3_json_names() -> list[str]:
    """Every kernel symbol the rocprofv3 JSON loaded (kernel_id 0 is an empty placeholder)."""
    with gzip.open(SAMPLES / "tracelens_mi350x_pytorch_train_908_results.json.gz") as handle:
        tool = json.load(handle)["rocprofiler-sdk-tool"][0]
    return [symbol["kernel_name"] for symbol in tool["kernel_symbols"] if symbol["kernel_name"]]


def _rpd_names(tmp_path: Path) -> list[str]:
    """Kernel names of the RPD trace: rocpd_op descriptions of kernel and task ops."""
    database = tmp_path / "trace.rpd"
    with gzip.open(SAMPLES / "rocmProfileData_vllm_fp8_mytrace.rpd.gz") as src:
        with open(database, "wb") as dst:
            shutil.copyfileobj(src, dst)
    query = (
        "SELECT d.string FROM rocpd_op o JOIN rocpd_string d ON d.id = o.description_id "
        "JOIN rocpd_string t ON t.id = o.opType_id WHERE t.string IN ('KernelExecution', 'Task')"
    )
    with sqlite3.connect(database) as connection:
        return [row[0] for row in connection.execute(query)]


@pytest.fixture(scope="module")
def sample_names(tmp_path_factory) -> dict[str, list[str]]:
    if not SAMPLES.is_dir():
        pytest.skip(f"profiler samples not found at {SAMPLES}")
    return {
        "rocprofv3_kernel_trace_csv": _csv_names(
            "sllm_r9700_decode_attn_564735_kernel_trace.csv", "Kernel_Name"
        ),
        "rocprofv3_counter_csv": _csv_names(
            "sllm_r9700_decode_attn_564735_counter_collection.csv", "Kernel_Name"
        ),
        "rocprof_v1_results_csv": _csv_names(
            "hpctraining_mi250_laplacian_rocprofv1_results.csv", "KernelName"
        ),
        "rocprofv3_json": _rocprofv3_json_names(),
        "rpd": _rpd_names(tmp_path_factory.mktemp("rpd")),
    }


def _allowed_reason(name: str) -> str | None:
    for pattern, reason in OTHER_ALLOWED.items():
        if re.search(pattern, name):
            return reason
    return None


def test_every_sample_kernel_has_a_family_or_a_reason(sample_names):
    unexplained, allow_list_used = [], set()
    for source, names in sample_names.items():
        assert names, f"{source}: no kernel names read"
        for name in set(names):
            if kernel_family(name) != "other":
                continue
            reason = _allowed_reason(name)
            if reason is None:
                unexplained.append((source, name[:160]))
            allow_list_used.add(reason)
    assert unexplained == []
    assert allow_list_used == set(OTHER_ALLOWED.values())  # every allow-list entry still needed


def test_family_counts_per_sample(sample_names):
    """The families each sample's distinct kernels fall in (see the report of this change)."""
    counts = {
        source: Counter(kernel_family(name) for name in set(names))
        for source, names in sample_names.items()
    }
    assert counts["rocprofv3_kernel_trace_csv"] == {"attention": 3, "copy": 1}
    assert counts["rocprofv3_counter_csv"] == {"attention": 1}
    assert counts["rocprof_v1_results_csv"] == {"copy": 1, "other": 3}
    assert counts["rocprofv3_json"].most_common(1)[0][0] == "gemm"
    assert counts["rocprofv3_json"]["communication"] > 0
    assert set(counts["rpd"]) == {
        "gemm",
        "attention",
        "softmax",
        "layernorm",
        "elementwise",
        "reduction",
        "copy",
    }


KNOWN = {
    "Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT256x224x128_MI16x16x1_SN_LDSB1": "gemm",
    "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_K1": "gemm",
    "Dijk_SS_MT32x32_VW4_Reduction.kd": "gemm",
    "void wvSpltK_hf_sml_<64, 2, 16, 8, 2, 2>(int, int, __half const*)": "gemm",
    "_ZN2ck27kernel_gemm_xdl_cshuffle_v1INS_28GridwiseGemm_k0mk1_k0nk1_mn": "gemm",
    "mlir_dot_add": "gemm",
    "__amd_rocclr_copyBuffer": "copy",
    "__amd_rocclr_fillBufferAligned.kd": "copy",
    "ullm_paged_decode_attn_f32_kernel": "attention",
    "ullm_paged_decode_attn_split_merge_f32_kernel": "attention",
    "_Z35paged_attention_ll4mi_reduce_kernelIDF16_Li128ELi128ELi512EEvPT_PKfS3_PKS0_PKii": (
        "attention"
    ),
    "_ZN7ck_tile6kentryILi256ELi2ENS_13FmhaFwdKernelINS_26FmhaFwdTilePartitioner_HBS": (
        "attention"
    ),
    "attn_fwd.kd": "attention",
    "naive_conv_fwd_nchw_float_double_float": "convolution",
    "igemm_fwd_gtcx_nchw_fp32_bx0_ex1_bt128x128x16": "convolution",
    "miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1": "convolution",
    "_Z23ncclDevKernel_Generic_124ncclDevKernelArgsStorageILm4096EE.kd": "communication",
    "mscclKernel_Sum_half_LL_false": "communication",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>": "softmax",
    "void vllm::scaled_rms_norm_kernel<c10::Half>(c10::Float8_e4m3fnuz*, float)": "layernorm",
    "_ZN2at6native12_GLOBAL__N_128vectorized_layer_norm_kernelIffLb0EEEviT0_PKT_.kd": ("layernorm"),
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, ArgMaxOps<float>>>": (
        "reduction"
    ),
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4ELi4EEEEEvT1_.kd": (
        "reduction"
    ),
    "void at::native::elementwise_kernel<128, 4, gpu_kernel_impl<direct_copy_kernel_cuda>>": (
        "copy"
    ),
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>>": "copy",
    "_ZN2at6native12_GLOBAL__N_126CatArrayBatchedCopy_contigINS1_10OpaqueTypeILj4EEEjLi1E.kd": (
        "copy"
    ),
    "void vllm::reshape_and_cache_kernel<unsigned short, unsigned char>": "copy",
    "void at::native::vectorized_elementwise_kernel<4, BinaryFunctor<DivFunctor<float>>>": (
        "elementwise"
    ),
    "void vllm::rotary_embedding_kernel<c10::Half, true>(long const*, c10::Half*)": "elementwise",
}


@pytest.mark.parametrize(("name", "family"), KNOWN.items())
def test_known_names(name, family):
    assert kernel_family(name) == family


def test_table_is_well_formed():
    assert {row.family for row in PATTERNS} <= set(FAMILIES)
    assert all(row.matches for row in PATTERNS)
    markdown = family_table_markdown()
    assert markdown.count("\n") == len(PATTERNS) + 2
    assert kernel_family(None) == kernel_family("") == "other"
    assert kernel_family("convert_fp8_kernel") != "convolution"  # "convert" is not a convolution


def test_vectorized_matches_scalar_on_a_million_rows(sample_names):
    distinct = sorted({name for names in sample_names.values() for name in names})
    rows = (distinct * (1_000_000 // len(distinct) + 1))[:1_000_000]
    names = pa.chunked_array([rows[:400_000], rows[400_000:] + [None]])
    started = time.perf_counter()
    families = kernel_families(names)
    elapsed = time.perf_counter() - started
    assert elapsed < 3.0, f"{elapsed:.2f}s for 1,000,000 rows"
    expected = {name: kernel_family(name) for name in distinct}
    assert families.to_pylist() == [expected[name] for name in rows] + ["other"]


def test_vectorized_accepts_dictionary_arrays():
    names = pa.array(["Cijk_Ailk_Bljk_SB", "__amd_rocclr_copyBuffer", None]).dictionary_encode()
    assert kernel_families(names).to_pylist() == ["gemm", "copy", "other"]
    chunked = pa.chunked_array([names, pa.array(["attn_fwd.kd"]).dictionary_encode()])
    assert kernel_families(chunked).to_pylist() == ["gemm", "copy", "other", "attention"]
