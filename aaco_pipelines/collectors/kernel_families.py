"""Kernel names → kernel families (gemm, attention, copy, ...), from the raw names profilers record.

A model's device time is only explainable per family: "62% GEMM, 20% attention, 9% copies" says
where to look, thousands of Tensile and ATen template names do not. Names are matched as recorded
(mangled or demangled, with or without a `.kd` suffix) so no demangler is needed. The table is
ordered from specific to generic and the first match wins: library-anchored rows come first, so a
CK FMHA kernel whose name also mentions a GEMM block stays attention, and rows of family "other"
claim names (sorting, runtime bookkeeping) that a later generic row would otherwise misfile.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

FAMILIES: tuple[str, ...] = (
    "gemm",
    "convolution",
    "attention",
    "softmax",
    "layernorm",
    "elementwise",
    "reduction",
    "copy",
    "communication",
    "other",
)


class FamilyPattern(NamedTuple):
    family: str
    pattern: re.Pattern
    matches: str  # what the row matches and which library emits it


def _row(family: str, regex: str, matches: str, *, case: bool = False) -> FamilyPattern:
    """A table row; case-insensitive rows are written in lower case (see `_LOWERED`)."""
    if not case and regex != regex.lower():
        raise ValueError(f"case-insensitive pattern must be lower case: {regex}")
    return FamilyPattern(family, re.compile(regex, 0 if case else re.IGNORECASE), matches)


PATTERNS: tuple[FamilyPattern, ...] = (
    # --- communication: collectives first, their names also say "reduce" -----------------------
    _row("communication", r"nccl|rccl|msccl", "RCCL/NCCL/MSCCL device kernels (ncclDevKernel_*)"),
    _row("communication", r"oneRankReduce", "RCCL single-rank reduce (`oneRankReduce`)", case=True),
    _row(
        "communication",
        r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv",
        "collectives named by operation (custom all-reduce, all-gather, ...)",
    ),
    # --- attention: before gemm/softmax, fused attention kernels mention both -------------------
    _row("attention", r"fmha", "Composable Kernel FMHA (`ck_tile::FmhaFwdKernel`, fmha_fwd/bwd)"),
    _row("attention", r"flash_?attn|flash_?(fwd|bwd)", "FlashAttention ports (CK, Triton)"),
    _row("attention", r"paged_?(decode_?)?att", "paged attention (vLLM `paged_attention_*`)"),
    _row(
        "attention",
        r"^(attn_fwd|bwd_kernel_(fuse|dk_dv|dq)|bwd_preprocess)\b",
        "AOTriton (PyTorch SDPA on ROCm) forward/backward kernels",
        case=True,
    ),
    _row(
        "attention",
        r"attention|attn|sdpa|scaled_dot_product|mha_(fwd|bwd)",
        "any other attention kernel",
    ),
    # --- convolution: before gemm, implicit-GEMM convolutions say "gemm" -------------------------
    _row("convolution", r"naive_conv", "MIOpen naive convolution (`naive_conv_*`)"),
    _row("convolution", r"igemm_", "MIOpen implicit-GEMM assembly (`igemm_fwd_gtcx_*`)"),
    _row("convolution", r"winograd|sp3asmconv", "MIOpen Winograd (`miopenSp3AsmConv*`)"),
    _row(
        "convolution",
        r"miopenconv|conv_?(fwd|bwd|wrw)|grouped_?conv|deviceconv",
        "MIOpen and Composable Kernel convolution solvers",
    ),
    _row("convolution", r"im2col|col2im|conv_?transpose|deconv", "lowered/transposed convolution"),
    _row("convolution", r"conv(?!ert)", "any other convolution (`convert` excluded)"),
    # --- gemm ------------------------------------------------------------------------------------
    _row(
        "gemm",
        r"(?i:hipblaslt)|^Cijk_\w*_UserArgs",
        "hipBLASLt (TensileLite `Cijk_*_UserArgs_MT*` kernels)",
        case=True,
    ),
    _row("gemm", r"^Cijk_", "rocBLAS Tensile GEMM (`Cijk_Ailk_Bljk_*`)", case=True),
    _row(
        "gemm",
        r"^Dijk_\w*_Reduction",
        "Tensile/hipBLASLt partial-tile reduction shipped with the GEMM (`Dijk_*_Reduction`)",
        case=True,
    ),
    _row("gemm", r"rocblas\w*(gem[mv]|trsm|syrk|herk)", "rocBLAS source kernels (gemm, gemv)"),
    _row(
        "gemm",
        r"device_?gemm|kernel_gemm_xdl|gridwise_gemm|ck_tile\w*gemm|gemmkernel",
        "Composable Kernel GEMM (`ck::kernel_gemm_xdl*`, `ck_tile::GemmKernel`)",
    ),
    _row("gemm", r"mlir_(gemm|dot|conv_gemm)|migraphx\w*gemm", "MIGraphX MLIR GEMM / dot"),
    _row("gemm", r"wvspli?tk|llmm1", "vLLM ROCm skinny GEMM (`wvSplitK*`, `LLMM1`)"),
    _row("gemm", r"gemm|gemv|matmul|bmm_|addmm", "any other GEMM (ATen, Triton matmul)"),
    # --- softmax and normalization layers --------------------------------------------------------
    _row("softmax", r"softmax", "softmax / log-softmax (ATen `cunn_SoftMaxForward`, MIOpen)"),
    _row(
        "layernorm",
        r"layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm",
        "normalization layers (layer/RMS/group/batch/instance norm)",
    ),
    _row(
        "layernorm",
        r"GammaBeta|RowwiseMoments|cuComputeGradInput",
        "ATen layer/group-norm statistics and backward kernels",
        case=True,
    ),
    # --- names a generic row below would misfile -------------------------------------------------
    _row(
        "other",
        r"rocprim\w*(sort|merge|onesweep|partition)|radix_?sort|merge_?sort",
        "sorting and partitioning (rocPRIM/hipCUB): no family of their own",
    ),
    _row(
        "other",
        r"__amd_rocclr_(initheap|streamops|batchmemop)|_assert_async",
        "runtime bookkeeping (device heap, stream waits/writes, async asserts)",
    ),
    # --- reductions whose names a copy row would take ("sum_and_scatter", "gatherTopK") -------
    _row(
        "reduction",
        r"embedding_backward|compute_grad_weight|sum_and_scatter|partial_?segment|partials_per_segment",
        "embedding backward (segmented sums of gradient rows)",
    ),
    _row("reduction", r"topk|argmax|argmin", "top-k and arg-max/min selection"),
    # --- copy: data movement, before elementwise (ATen copies run as elementwise kernels) -------
    _row(
        "copy",
        r"__amd_rocclr_(copy|fill)(Buffer|Image)|^FillBuffer$",
        "HIP runtime blit kernels (`__amd_rocclr_copyBuffer`, `fillBufferAligned`; RPD's "
        "`FillBuffer`)",
        case=True,
    ),
    _row("copy", r"memcpy|memset", "memcpy/memset kernels"),
    _row(
        "copy",
        r"direct_copy_kernel|_copy_kernel_cuda|copy_kernel|fillfunctor|fill_kernel",
        "ATen `copy_`/dtype casts and `fill_` (run inside elementwise kernels)",
    ),
    _row("copy", r"catarray|concat", "concatenation (ATen `CatArrayBatchedCopy`)"),
    _row("copy", r"transpose|permute", "transposes and permutes"),
    _row(
        "copy",
        r"reshape_and_cache|copy_blocks|swap_blocks",
        "KV-cache writes and block copies (vLLM)",
    ),
    _row(
        "copy",
        r"gather|index_?select|index_(elementwise_)?kernel|scatter",
        "gathers, index_select and scatters (embedding lookups)",
    ),
    # --- reduction ---------------------------------------------------------------------------------
    _row("reduction", r"reduce|reduction", "ATen `reduce_kernel`, MIOpen/CK reductions"),
    _row("reduction", r"lpnorm|lpmax|renorm|norm_?(one|two|zero)?_?ops", "vector norms"),
    _row("reduction", r"scan|cumsum|cumprod|prefix_?sum", "prefix scans (rocPRIM, ATen cumsum)"),
    _row("reduction", r"histogram|bincount|(?<![a-z])sum(?![a-z])", "histograms and sums"),
    # --- elementwise -------------------------------------------------------------------------------
    _row(
        "elementwise",
        r"elementwise|multi_tensor_apply|pointwise",
        "ATen elementwise/foreach (optimizer) kernels, MIGraphX pointwise",
    ),
    _row(
        "elementwise",
        r"relu|gelu|silu|swish|sigmoid|tanh|act_and_mul|activation|mish",
        "activations",
    ),
    _row(
        "elementwise",
        r"dropout|rotary|_rope_|quant|transform_kernel|add_kernel|mul_kernel",
        "dropout, rotary embedding, (de)quantization and other pointwise kernels",
    ),
)

_OTHER = "other"

# The same rows for matching: a lower-cased name against a flag-less pattern is what
# re.IGNORECASE means for ASCII names, and about four times faster on long mangled names.
_LOWERED = tuple(
    (row.family, re.compile(row.pattern.pattern), bool(row.pattern.flags & re.IGNORECASE))
    for row in PATTERNS
)


@functools.lru_cache(maxsize=1 << 16)
def kernel_family(name: str | None) -> str:
    """The family of one kernel name; "other" when no row matches (or no name). Cached: the
    same few thousand names come back in every batch of a ten-million-kernel trace."""
    if not name:
        return _OTHER
    lowered = name.lower()
    for family, pattern, ignore_case in _LOWERED:
        if pattern.search(lowered if ignore_case else name):
            return family
    return _OTHER


def _classify(distinct: pa.Array) -> pa.Array:
    return pa.array([kernel_family(name) for name in distinct.to_pylist()], pa.string())


def kernel_families(names: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Families for a column of kernel names, each distinct name classified once.

    A trace holds millions of dispatches but only thousands of distinct names, so the regex
    table runs per distinct name and the answers are mapped back with a take. Chunks are never
    concatenated: ten million long template names exceed one string array's 2 GiB.
    """
    chunks = names.chunks if isinstance(names, pa.ChunkedArray) else [names]
    parts = []
    for chunk in chunks:
        encoded = chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)
        parts.append(_classify(encoded.dictionary).take(encoded.indices))
    return pa.chunked_array(parts, pa.string()).combine_chunks().fill_null(_OTHER)


def family_table_markdown() -> str:
    """The pattern table as Markdown, in matching order, for the README."""
    lines = ["| # | family | pattern | matches |", "|---|---|---|---|"]
    for number, row in enumerate(PATTERNS, start=1):
        regex = row.pattern.pattern.replace("|", "\\|")
        flags = "" if row.pattern.flags & re.IGNORECASE else " (case-sensitive)"
        lines.append(f"| {number} | {row.family} | `{regex}`{flags} | {row.matches} |")
    return "\n".join(lines) + "\n"
