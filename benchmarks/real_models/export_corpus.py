"""Export the corpus of small, real ONNX models in ``tests/data/real_models``.

Every model is a real architecture (Hugging Face ``transformers`` built from a config object, or
plain ``torch.nn``) with random weights from fixed seeds, shrunk by narrow widths, few layers and
small inputs so each file stays a few MB, and exported by a real exporter: the TorchScript exporter
(``torch.onnx.export(..., dynamo=False)``), the dynamo exporter (``dynamo=True``), and the
``onnxruntime`` quantization and transformer-optimizer tools applied to those exports. Nothing is
downloaded: no ``from_pretrained``, no hub.

Every model has fixed input shapes (the KV-cache decoder runs at its RUN_SHAPES), keeps its
weights in the ``.onnx`` file, passes ``onnx.checker.check_model`` and
``onnx.shape_inference.infer_shapes``, and runs once on random and on all-zero integer inputs in
``onnxruntime`` (CPU, ``ORT_ENABLE_ALL``) with finite outputs before it is kept. Beside each model
it writes ``<model>.json``, a sidecar in the project's format (int64 input bounds, run shapes,
tags), and for the corpus ``manifest.json`` (inputs, ranges, op types, sizes, sha256) and README.

It needs its own virtual environment, outside the project's (``torch`` is no dependency of the
project)::

    python3 -m venv /work/torch-venv
    /work/torch-venv/bin/pip install torch==2.13.0 transformers==5.24.0 onnx==1.23.2 \\
        onnxscript==0.7.2 onnx-ir==1.1.0 onnxruntime-rocm==1.22.2.post3 numpy==2.4.6 coloredlogs

(The versions the committed corpus was made with; with them the output is byte-identical run
after run. The dynamo exports embed Python stack traces with file paths and line numbers, so
editing this script or moving the venv changes their bytes, not their graphs.)

Usage::

    /work/torch-venv/bin/python benchmarks/real_models/export_corpus.py --out tests/data/real_models
    # only some models (derived models rebuild the fp32 model they come from in a temp dir):
    /work/torch-venv/bin/python benchmarks/real_models/export_corpus.py --out /tmp/rm --only bert_ts
    # list the models:
    /work/torch-venv/bin/python benchmarks/real_models/export_corpus.py --list
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import io
import json
import logging
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

SEED = 20261121
TS_OPSET = 17  # TorchScript exporter: the opset most deployed ORT builds were validated with
DYNAMO_OPSET = 18  # dynamo exporter: its own default and lowest supported opset

# --------------------------------------------------------------------------------------------
# Model registry
# --------------------------------------------------------------------------------------------


@dataclass
class Entry:
    name: str  # file stem
    architecture: str
    exporter: str  # short tag shown in the README
    build: Callable[[Path, dict[str, Path]], None]  # (output path, already built paths) -> None
    notes: str = ""
    needs: tuple[str, ...] = ()  # models this one is derived from
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # input -> [lo, hi)


REGISTRY: dict[str, Entry] = {}


def register(name, architecture, exporter, notes="", needs=(), int_ranges=None):
    def deco(fn):
        REGISTRY[name] = Entry(
            name, architecture, exporter, fn, notes, tuple(needs), dict(int_ranges or {})
        )
        return fn

    return deco


def seed_all(seed: int = SEED) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


# --------------------------------------------------------------------------------------------
# Export helpers
# --------------------------------------------------------------------------------------------


def plain_outputs(model: nn.Module, arg_names, keys) -> nn.Module:
    """Make a HF model return a tuple of tensors (no ModelOutput) and take positional inputs.

    The model's class is swapped for a subclass of the same name whose ``forward`` maps the
    positional export arguments to keyword arguments and picks ``keys`` from the output, so the
    exported graph keeps the model as its root module: TorchScript node names read
    ``/bert/encoder/layer.0/...`` exactly as when exporting the model itself, with no wrapper
    prefix. (``return_dict=False`` would do the same but is broken for some models in
    transformers 5.)
    """
    base = type(model)

    def forward(self, *args):
        out = base.forward(self, **dict(zip(arg_names, args, strict=True)))
        res = tuple(out[k] for k in keys)
        return res[0] if len(res) == 1 else res

    model.__class__ = type(
        base.__name__,
        (base,),
        {"forward": forward, "__module__": base.__module__, "__qualname__": base.__qualname__},
    )
    return model.eval()


def _inline_weights(path: Path) -> None:
    """Re-save ``path`` with every initializer inside the file and no external data beside it."""
    model = onnx.load(str(path), load_external_data=True)
    for f in path.parent.glob(path.name + ".data"):
        f.unlink()
    onnx.save_model(model, str(path), save_as_external_data=False)


def export_torchscript(module, args, path: Path, input_names, output_names, opset=TS_OPSET):
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(args),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=list(input_names),
            output_names=list(output_names),
            do_constant_folding=True,
            external_data=False,
        )
    _inline_weights(path)


def export_dynamo(module, args, path: Path, input_names, output_names, opset=DYNAMO_OPSET):
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            tuple(args),
            dynamo=True,
            opset_version=opset,
            input_names=list(input_names),
            output_names=list(output_names),
            optimize=True,
            external_data=False,
        )
        program.save(str(path), external_data=False)
    _inline_weights(path)


def _image(batch=1, channels=3, size=64):
    return torch.randn(batch, channels, size, size)


def _ids(vocab, batch=1, seq=32):
    return torch.randint(0, vocab, (batch, seq), dtype=torch.int64)


# --------------------------------------------------------------------------------------------
# Vision
# --------------------------------------------------------------------------------------------


def _resnet():
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(
        num_channels=3,
        embedding_size=16,
        hidden_sizes=[12, 24, 48, 96],
        depths=[2, 2, 2, 2],
        layer_type="basic",
        hidden_act="relu",
        num_labels=10,
    )
    return ResNetForImageClassification(cfg)


@register(
    "resnet_ts",
    "ResNet-18 topology (HF ResNetForImageClassification, basic blocks "
    "[2,2,2,2], widths 12-96), 1x3x64x64",
    "torchscript",
    notes="Conv with folded BatchNorm, Relu, MaxPool, residual Add, GlobalAveragePool, Gemm",
)
def build_resnet_ts(path, built):
    seed_all()
    model = plain_outputs(_resnet(), ["pixel_values"], ["logits"])
    export_torchscript(model, [_image()], path, ["pixel_values"], ["logits"])


@register(
    "mobilenetv2_ts",
    "MobileNetV2 (HF MobileNetV2ForImageClassification, depth "
    "multiplier 0.35, symmetric padding), 1x3x96x96",
    "torchscript",
    notes="inverted residuals: 1x1 expand Conv, depthwise 3x3 Conv group=C, Clip (ReLU6), "
    "linear 1x1 projection Conv, residual Add",
)
def build_mobilenetv2_ts(path, built):
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    seed_all()
    # tf_padding=False: symmetric Conv pads as in torchvision's MobileNetV2; with the default
    # TF "same" padding every Conv gets a traced chain of ~20 shape ops and a Pad in front.
    cfg = MobileNetV2Config(depth_multiplier=0.35, image_size=96, num_labels=10, tf_padding=False)
    model = plain_outputs(MobileNetV2ForImageClassification(cfg), ["pixel_values"], ["logits"])
    export_torchscript(model, [_image(size=96)], path, ["pixel_values"], ["logits"])


def _regnet():
    from transformers import RegNetConfig, RegNetForImageClassification

    cfg = RegNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 64, 128],
        depths=[1, 1, 2, 1],
        groups_width=8,
        layer_type="y",  # RegNetY: squeeze-and-excitation in every block
        num_labels=10,
    )
    return RegNetForImageClassification(cfg)


@register(
    "regnet_dynamo",
    "RegNetY (HF RegNetForImageClassification, group width 8, SE blocks, widths 16-128), 1x3x64x64",
    "dynamo",
    notes="grouped Conv, squeeze-excitation (ReduceMean/Sigmoid/Mul)",
)
def build_regnet_dynamo(path, built):
    seed_all()
    model = plain_outputs(_regnet(), ["pixel_values"], ["logits"])
    export_dynamo(model, [_image()], path, ["pixel_values"], ["logits"])


@register(
    "efficientnet_ts",
    "EfficientNet-B0 topology (HF EfficientNetForImageClassification, "
    "width 0.25, depth 0.34), 1x3x64x64",
    "torchscript",
    notes="MBConv: depthwise Conv, SiLU (Sigmoid*Mul), squeeze-excitation, explicit Pad "
    "before the stem and the stride-2 depthwise convs",
)
def build_efficientnet_ts(path, built):
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    seed_all()
    cfg = EfficientNetConfig(
        image_size=64,
        width_coefficient=0.25,
        depth_coefficient=0.34,
        hidden_dim=320,  # must equal round_filters(1280) at this width (top BatchNorm)
        num_labels=10,
    )
    model = plain_outputs(EfficientNetForImageClassification(cfg), ["pixel_values"], ["logits"])
    export_torchscript(model, [_image()], path, ["pixel_values"], ["logits"])


def _convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification

    cfg = ConvNextConfig(
        hidden_sizes=[16, 32, 64, 128],
        depths=[1, 1, 2, 1],
        num_labels=10,
        image_size=64,
    )
    return ConvNextForImageClassification(cfg)


@register(
    "convnext_ts",
    "ConvNeXt (HF ConvNextForImageClassification, depths [1,1,2,1], widths 16-128), 1x3x64x64",
    "torchscript",
    notes="depthwise 7x7 Conv, LayerNormalization, Gelu/Erf, layer scale Mul",
)
def build_convnext_ts(path, built):
    seed_all()
    model = plain_outputs(_convnext(), ["pixel_values"], ["logits"])
    export_torchscript(model, [_image()], path, ["pixel_values"], ["logits"])


@register(
    "convnext_dynamo",
    "same ConvNeXt as convnext_ts (same seed, same weights)",
    "dynamo",
    notes="same network as convnext_ts through the other exporter",
)
def build_convnext_dynamo(path, built):
    seed_all()
    model = plain_outputs(_convnext(), ["pixel_values"], ["logits"])
    export_dynamo(model, [_image()], path, ["pixel_values"], ["logits"])


@register(
    "vit_ts",
    "ViT (HF ViTForImageClassification, 2 layers, hidden 64, 4 heads, patch 4), 1x3x32x32",
    "torchscript",
    notes="patch-embedding Conv stride 4, CLS token Concat, eager attention MatMul/Softmax",
)
def build_vit_ts(path, built):
    from transformers import ViTConfig, ViTForImageClassification

    seed_all()
    cfg = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=4,
        num_labels=10,
        attn_implementation="eager",
    )
    model = plain_outputs(ViTForImageClassification(cfg), ["pixel_values"], ["logits"])
    export_torchscript(model, [_image(size=32)], path, ["pixel_values"], ["logits"])


class _DoubleConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """A small U-Net: 3 encoder stages, a bottleneck, 3 decoder stages with skip connections.

    The two deepest decoder stages upsample with ``ConvTranspose2d``, the last with bilinear
    ``Upsample`` (ONNX ``Resize``), so both upsampling styles are in the graph.
    """

    def __init__(self, in_ch=3, n_classes=4, widths=(16, 32, 64), bottleneck=128):
        super().__init__()
        self.downs = nn.ModuleList()
        c = in_ch
        for w in widths:
            self.downs.append(_DoubleConv(c, w))
            c = w
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = _DoubleConv(c, bottleneck)
        self.ups = nn.ModuleList()
        self.decs = nn.ModuleList()
        c = bottleneck
        for i, w in enumerate(reversed(widths)):
            if i < len(widths) - 1:
                self.ups.append(nn.ConvTranspose2d(c, w, 2, stride=2))
            else:
                self.ups.append(
                    nn.Sequential(
                        nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                        nn.Conv2d(c, w, 1),
                    )
                )
            self.decs.append(_DoubleConv(2 * w, w))
            c = w
        self.head = nn.Conv2d(c, n_classes, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.ups, self.decs, reversed(skips), strict=True):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.head(x)


@register(
    "unet_ts",
    "U-Net in plain torch.nn (3 stages 16-64, bottleneck 128, skip Concat, "
    "ConvTranspose + bilinear Resize upsampling), 1x3x64x64 -> 1x4x64x64",
    "torchscript",
    notes="ConvTranspose, Resize (linear), MaxPool, Concat skips; BatchNorm folded",
)
def build_unet_ts(path, built):
    seed_all()
    model = UNet()
    # A few train-mode passes so BatchNorm running statistics are not the trivial 0/1.
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(_image(batch=2))
    export_torchscript(model, [_image()], path, ["image"], ["mask_logits"])


@register(
    "segformer_ts",
    "SegFormer (HF SegformerForSemanticSegmentation, 4 stages, hidden "
    "16-64, sr ratios 8/4/2/1), 1x3x64x64 -> 1x5x16x16",
    "torchscript",
    notes="overlapping patch-embed Conv, efficient self-attention with spatial-reduction "
    "Conv, Mix-FFN depthwise Conv, all-MLP decode head with Resize (bilinear)",
)
def build_segformer_ts(path, built):
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    seed_all()
    cfg = SegformerConfig(
        num_encoder_blocks=4,
        depths=[1, 1, 1, 1],
        hidden_sizes=[16, 32, 48, 64],
        num_attention_heads=[1, 2, 2, 4],
        decoder_hidden_size=64,
        num_labels=5,
        attn_implementation="eager",
    )
    model = plain_outputs(SegformerForSemanticSegmentation(cfg), ["pixel_values"], ["logits"])
    export_torchscript(model, [_image()], path, ["pixel_values"], ["logits"])


# --------------------------------------------------------------------------------------------
# Language and speech
# --------------------------------------------------------------------------------------------

BERT_VOCAB = 1024
BERT_SEQ = 32
BERT_HEADS = 4
BERT_HIDDEN = 64


@register(
    "bert_ts",
    f"BERT (HF BertModel, 2 layers, hidden {BERT_HIDDEN}, {BERT_HEADS} heads, "
    f"FFN 128, vocab {BERT_VOCAB}), batch 1 x seq {BERT_SEQ}",
    "torchscript",
    notes="Gather embeddings, LayerNormalization, eager attention MatMul/Mul/Softmax, "
    "transformers 5 mask prologue at the root scope (Cast/And/Where from a boolean mask to an "
    "additive one), Erf GELU, pooler Tanh",
    int_ranges={"input_ids": (0, BERT_VOCAB), "attention_mask": (0, 2)},
)
def build_bert_ts(path, built):
    from transformers import BertConfig, BertModel

    seed_all()
    cfg = BertConfig(
        vocab_size=BERT_VOCAB,
        hidden_size=BERT_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=BERT_HEADS,
        intermediate_size=128,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = plain_outputs(
        BertModel(cfg), ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]
    )
    ids = _ids(BERT_VOCAB, seq=BERT_SEQ)
    mask = torch.ones(1, BERT_SEQ, dtype=torch.int64)
    mask[:, BERT_SEQ - 5 :] = 0
    export_torchscript(
        model,
        [ids, mask],
        path,
        ["input_ids", "attention_mask"],
        ["last_hidden_state", "pooler_output"],
    )


def _classic_bert_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """BERT self-attention written as transformers 4.x wrote it: scores / sqrt(d) + additive mask.

    transformers 5's eager attention multiplies by ``scaling`` and builds a boolean mask
    (``Where``); onnxruntime 1.22's ``FusionAttention`` patterns predate that and fuse neither.
    Registered through transformers' public ``AttentionInterface``.
    """
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(query.size(-1))
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs


@register(
    "bert_classic_ts",
    "same BERT as bert_ts (same seed, same weights) with transformers "
    "4.x attention math: additive extended mask (1 - m) * min and scores / sqrt(d)",
    "torchscript",
    notes="the input of bert_ort_fused: an attention implementation registered through "
    "transformers.AttentionInterface and the extended mask of transformers 4.x "
    "(Unsqueeze/Cast/Sub/Mul at the root scope), the graph shape onnxruntime 1.22's fusion "
    "patterns expect",
    int_ranges={"input_ids": (0, BERT_VOCAB), "attention_mask": (0, 2)},
)
def build_bert_classic_ts(path, built):
    from transformers import AttentionInterface, BertConfig, BertModel

    AttentionInterface.register("classic_bert", _classic_bert_attention)
    seed_all()
    cfg = BertConfig(
        vocab_size=BERT_VOCAB,
        hidden_size=BERT_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=BERT_HEADS,
        intermediate_size=128,
        max_position_embeddings=64,
        attn_implementation="classic_bert",
    )
    model = BertModel(cfg)
    base = type(model)

    def forward(self, input_ids, attention_mask):
        # BertModel.get_extended_attention_mask of transformers 4.x; a 4-D float mask is passed
        # through unchanged by transformers 5.
        ext = attention_mask[:, None, None, :].to(torch.float32)
        ext = (1.0 - ext) * torch.finfo(torch.float32).min
        out = base.forward(self, input_ids=input_ids, attention_mask=ext)
        return out.last_hidden_state, out.pooler_output

    model.__class__ = type(
        base.__name__,
        (base,),
        {"forward": forward, "__module__": base.__module__, "__qualname__": base.__qualname__},
    )
    ids = _ids(BERT_VOCAB, seq=BERT_SEQ)
    mask = torch.ones(1, BERT_SEQ, dtype=torch.int64)
    mask[:, BERT_SEQ - 5 :] = 0
    export_torchscript(
        model.eval(),
        [ids, mask],
        path,
        ["input_ids", "attention_mask"],
        ["last_hidden_state", "pooler_output"],
    )


LLAMA_VOCAB = 512
LLAMA_SEQ = 32


@register(
    "llama_dynamo",
    f"Llama decoder (HF LlamaForCausalLM, 2 layers, hidden 64, 4 query "
    f"heads / 2 KV heads (GQA), SwiGLU 128, RMSNorm, rotary, vocab {LLAMA_VOCAB}), "
    f"input_ids 1x{LLAMA_SEQ} -> logits, no KV cache",
    "dynamo",
    notes="RMSNorm as Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul, rotary rotate_half as "
    "Slice/Neg/Concat (the cos/sin tables are folded to constants at the fixed length), "
    "GQA key/value repeat as Unsqueeze/Expand/Reshape, SwiGLU as Sigmoid/Mul, causal mask "
    "folded to a constant",
    int_ranges={"input_ids": (0, LLAMA_VOCAB)},
)
def build_llama_dynamo(path, built):
    from transformers import LlamaConfig, LlamaForCausalLM

    seed_all()
    cfg = LlamaConfig(
        vocab_size=LLAMA_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        use_cache=False,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    # use_cache=False: input_ids -> logits, no past key/values in or out
    model = plain_outputs(LlamaForCausalLM(cfg), ["input_ids"], ["logits"])
    export_dynamo(model, [_ids(LLAMA_VOCAB, seq=LLAMA_SEQ)], path, ["input_ids"], ["logits"])


WHISPER_MELS = 80
WHISPER_FRAMES = 200  # = 2 * max_source_positions: the encoder only takes this exact length


@register(
    "whisper_encoder_ts",
    f"Whisper encoder (HF WhisperModel encoder, 2 layers, d_model 64, "
    f"4 heads), log-mel 1x{WHISPER_MELS}x{WHISPER_FRAMES}",
    "torchscript",
    notes="Conv1d stem (stride 1 and 2) with Gelu, sinusoidal positions, pre-LN attention",
)
def build_whisper_encoder_ts(path, built):
    from transformers import WhisperConfig, WhisperModel

    seed_all()
    cfg = WhisperConfig(
        vocab_size=256,
        num_mel_bins=WHISPER_MELS,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        max_source_positions=WHISPER_FRAMES // 2,
        max_target_positions=32,
        pad_token_id=0,  # the defaults (50256/50257) lie outside the small vocabulary
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        attn_implementation="eager",
    )
    # The encoder exported alone, as encoder/decoder splits of Whisper do.
    model = plain_outputs(
        WhisperModel(cfg).get_encoder(), ["input_features"], ["last_hidden_state"]
    )
    feats = torch.randn(1, WHISPER_MELS, WHISPER_FRAMES)
    export_torchscript(model, [feats], path, ["input_features"], ["last_hidden_state"])


T5_VOCAB = 256


@register(
    "t5_ts",
    f"T5 encoder-decoder (HF T5ForConditionalGeneration, 2+2 layers, d_model 64, "
    f"4 heads, relative position buckets, vocab {T5_VOCAB}), encoder 1x32, decoder 1x16 "
    f"ids -> logits, no KV cache",
    "torchscript",
    notes="T5 RMS LayerNorm (Pow/ReduceMean), relative position bias Gather, "
    "cross-attention, ReLU FFN",
    int_ranges={"input_ids": (0, T5_VOCAB), "decoder_input_ids": (0, T5_VOCAB)},
)
def build_t5_ts(path, built):
    from transformers import T5Config, T5ForConditionalGeneration

    seed_all()
    cfg = T5Config(
        vocab_size=T5_VOCAB,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=16,
        relative_attention_max_distance=32,
        use_cache=False,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    model = plain_outputs(
        T5ForConditionalGeneration(cfg), ["input_ids", "decoder_input_ids"], ["logits"]
    )
    export_torchscript(
        model,
        [_ids(T5_VOCAB, seq=32), _ids(T5_VOCAB, seq=16)],
        path,
        ["input_ids", "decoder_input_ids"],
        ["logits"],
    )


# --------------------------------------------------------------------------------------------
# Derived with onnxruntime tools
# --------------------------------------------------------------------------------------------


class _RandomReader:
    """A calibration reader of a few random fp32 batches for every graph input."""

    def __init__(self, model_path: Path, n: int = 8):
        sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(SEED)
        self._batches = iter(
            [
                {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
                for _ in range(n)
            ]
        )

    def get_next(self):
        return next(self._batches, None)


def _preprocess(src: Path, dst: Path) -> None:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)


@register(
    "resnet_qdq",
    "resnet_ts quantized static int8, QDQ format (per-channel weights, random calibration)",
    "onnxruntime.quantization",
    notes="QuantizeLinear/DequantizeLinear pairs around fp32 Conv/Add/Gemm",
    needs=("resnet_ts",),
)
def build_resnet_qdq(path, built):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    seed_all()
    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        _preprocess(built["resnet_ts"], pre)
        quantize_static(
            str(pre),
            str(path),
            _RandomReader(pre),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )


@register(
    "mobilenetv2_qoperator",
    "mobilenetv2_ts quantized static int8, QOperator format (random calibration)",
    "onnxruntime.quantization",
    notes="QLinearConv (depthwise too), QLinearAdd, QLinearGlobalAveragePool, QGemm (com.microsoft)",
    needs=("mobilenetv2_ts",),
)
def build_mobilenetv2_qoperator(path, built):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    seed_all()
    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        _preprocess(built["mobilenetv2_ts"], pre)
        quantize_static(
            str(pre),
            str(path),
            _RandomReader(pre),
            quant_format=QuantFormat.QOperator,
            per_channel=False,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QUInt8,
        )


@register(
    "bert_dynamic_int8",
    "bert_ts quantized dynamic int8 (weights int8, activations quantized at run time)",
    "onnxruntime.quantization",
    notes="DynamicQuantizeLinear + MatMulInteger + Cast/Mul rescale",
    needs=("bert_ts",),
    int_ranges={"input_ids": (0, BERT_VOCAB), "attention_mask": (0, 2)},
)
def build_bert_dynamic_int8(path, built):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    seed_all()
    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        _preprocess(built["bert_ts"], pre)
        quantize_dynamic(str(pre), str(path), weight_type=QuantType.QInt8)


@register(
    "bert_ort_fused",
    "bert_classic_ts through onnxruntime.transformers.optimizer "
    "(model_type=bert, opt_level=0: the Python fusions only, no ORT graph optimizations)",
    "onnxruntime.transformers optimizer",
    notes="com.microsoft Attention (mask as ReduceSum mask_index), SkipLayerNormalization, "
    "BiasGelu. No EmbedLayerNormalization: that fusion matches the Shape->Gather->Slice "
    "position-id path of a dynamic-axes export, which a fixed-shape export folds away "
    "(and with dynamic axes transformers 5's (B, S, -1, d) head reshape defeats the "
    "Attention fusion instead)",
    needs=("bert_classic_ts",),
    int_ranges={"input_ids": (0, BERT_VOCAB), "attention_mask": (0, 2)},
)
def build_bert_ort_fused(path, built):
    from onnxruntime.transformers.optimizer import optimize_model

    seed_all()
    opt = optimize_model(
        str(built["bert_classic_ts"]),
        model_type="bert",
        num_heads=BERT_HEADS,
        hidden_size=BERT_HIDDEN,
        opt_level=0,
        use_gpu=False,
    )
    opt.save_model_to_file(str(path), use_external_data_format=False)


# --------------------------------------------------------------------------------------------
# Control flow
# --------------------------------------------------------------------------------------------


class _ControlFlow(nn.Module):
    """A scripted module whose loop and branch survive as ONNX Loop and If nodes.

    The loop runs ``x.size(1)`` times (fixed by the input shape, so random inputs cannot make it
    run away); inside it a data-dependent branch picks one of two updates from the sign of a
    reduction of the running state.
    """

    def __init__(self, width: int = 32):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.size(0), x.size(2), dtype=x.dtype)
        for t in range(x.size(1)):
            h = h + x[:, t]
            if bool(h.sum() > 0):
                h = torch.tanh(self.a(h))
            else:
                h = torch.relu(self.b(h)) - 0.5
        if bool(h.mean() > 0):
            y = self.out(h)
        else:
            y = -self.out(h)
        return y


@register(
    "control_flow_ts",
    "torch.jit.script'ed recurrence: Loop over the 8 time steps with a "
    "data-dependent If inside and another If after, input 4x8x32",
    "torchscript (scripted)",
    notes="Loop with If in its body, If; nested subgraphs with Gemm/Tanh/Relu",
)
def build_control_flow_ts(path, built):
    seed_all()
    model = torch.jit.script(_ControlFlow().eval())
    x = torch.randn(4, 8, 32)
    export_torchscript(model, [x], path, ["x"], ["y"])


class _Cond(nn.Module):
    """A data-dependent branch written with ``torch.cond``, which the dynamo exporter turns into If."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def pos(h):
            return torch.tanh(self.a(h))

        def neg(h):
            return torch.relu(self.b(h)) - 0.5

        return self.out(torch.cond(x.sum() > 0, pos, neg, (x,)))


@register(
    "control_flow_cond_dynamo",
    "torch.cond branch between two Linear+activation paths, input 4x32",
    "dynamo",
    notes="If with a Gemm in each branch (the dynamo exporter's translation of torch.cond)",
)
def build_control_flow_cond_dynamo(path, built):
    seed_all()
    export_dynamo(_Cond().eval(), [torch.randn(4, 32)], path, ["x"], ["y"])


def _scan_model() -> onnx.ModelProto:
    """A cumulative RNN-like Scan (h_t = tanh(W x_t + U h_{t-1})) built with onnx.helper."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    seq, batch, width = 8, 4, 32
    w = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) * 0.2, "W")
    u = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) * 0.2, "U")
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "W"], ["wx"], name="scan_body/MatMul_x"),
            helper.make_node("MatMul", ["h_in", "U"], ["uh"], name="scan_body/MatMul_h"),
            helper.make_node("Add", ["wx", "uh"], ["pre"], name="scan_body/Add"),
            helper.make_node("Tanh", ["pre"], ["h_out"], name="scan_body/Tanh"),
            helper.make_node("Identity", ["h_out"], ["y_t"], name="scan_body/Identity"),
        ],
        "scan_body",
        [
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [batch, width]),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [batch, width]),
        ],
        [
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [batch, width]),
            helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [batch, width]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "ConstantOfShape",
                ["h0_shape"],
                ["h0"],
                name="h0",
                value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]),
            ),
            helper.make_node(
                "Scan", ["h0", "x"], ["h_last", "ys"], name="rnn/Scan", body=body, num_scan_inputs=1
            ),
            helper.make_node(
                "ReduceMean", ["ys"], ["pooled"], name="pool/ReduceMean", axes=[0], keepdims=0
            ),
            helper.make_node("Add", ["pooled", "h_last"], ["y"], name="out/Add"),
        ],
        "scan_rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])],
        initializer=[
            w,
            u,
            numpy_helper.from_array(np.array([batch, width], dtype=np.int64), "h0_shape"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        producer_name="onnx.helper (export_corpus.py)",
    )
    model.ir_version = 8
    return model


@register(
    "control_flow_scan_helper",
    "hand-built RNN over 8 steps with Scan (neither PyTorch exporter emits Scan), input 8x4x32",
    "onnx.helper",
    notes="Scan with MatMul/Add/Tanh body",
)
def build_control_flow_scan_helper(path, built):
    onnx.save_model(_scan_model(), str(path))


# --------------------------------------------------------------------------------------------
# A decoder with its KV cache. Kept after every other model: the dynamo exports embed this
# file's line numbers, so code added above theirs would change their bytes.
# --------------------------------------------------------------------------------------------

# The concrete shapes that dynamic inputs run at (checks, manifest, sidecar): model -> input ->
# shape. Models not named here have fixed shapes.
RUN_SHAPES: dict[str, dict[str, list[int]]] = {}

LLAMA_KV_LAYERS = 2
LLAMA_KV_HEADS = 2  # key/value heads (GQA)
LLAMA_HEAD_DIM = 16  # hidden 64 / 4 query heads
LLAMA_MAX_POSITIONS = 128
KV_NAMES = [f"{i}.{p}" for i in range(LLAMA_KV_LAYERS) for p in ("key", "value")]
KV_INPUTS = ["input_ids", "attention_mask", "position_ids"]
KV_INPUTS += [f"past_key_values.{n}" for n in KV_NAMES]
KV_OUTPUTS = ["logits", *(f"present.{n}" for n in KV_NAMES)]


class LlamaWithPast(nn.Module):
    """LlamaForCausalLM with the cache as flat tensors, in the decoder-with-past convention of
    Hugging Face Optimum and ONNX Runtime GenAI (``past_key_values.N.key`` in, ``present.N.key``
    out). transformers 5 takes the cache only as a Cache object, built here from the tensors."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, past):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
        )
        presents = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
        return (out.logits, *presents)


def _llama_kv_feed(batch, seq, past, generator=None):
    """Tokens, an all-ones mask over past + new positions, positions past.., and a past cache."""
    ids = torch.randint(0, LLAMA_VOCAB, (batch, seq), generator=generator)
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    positions = torch.arange(past, past + seq).expand(batch, seq).contiguous()
    shape = (batch, LLAMA_KV_HEADS, past, LLAMA_HEAD_DIM)
    cache = tuple(torch.randn(shape, generator=generator) for _ in KV_NAMES)
    return ids, mask, positions, cache


def _check_llama_kv(module, path: Path) -> None:
    """The export against the module in onnxruntime: a prefill with an empty past (length 0),
    then a decode step of one token on the prefill's presents."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids, mask, positions, past = _llama_kv_feed(2, 6, 0, torch.Generator().manual_seed(SEED))
    for step in ("prefill", "decode"):
        with torch.no_grad():
            expected = module(ids, mask, positions, past)
        args = (ids, mask, positions, *past)
        got = sess.run(None, {n: a.numpy() for n, a in zip(KV_INPUTS, args, strict=True)})
        for name, g, e in zip(KV_OUTPUTS, got, expected, strict=True):
            if g.shape != tuple(e.shape) or not np.allclose(g, e.numpy(), atol=1e-4, rtol=0):
                raise RuntimeError(f"{path.name}: {step} {name} differs from the PyTorch model")
        ids = torch.from_numpy(got[0][:, -1:].argmax(-1))
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        positions = positions[:, -1:] + 1
        past = tuple(torch.from_numpy(t) for t in got[1:])


RUN_SHAPES["llama_kv_dynamo"] = {
    "input_ids": [1, 8],
    "attention_mask": [1, 16],
    "position_ids": [1, 8],
    **{f"past_key_values.{n}": [1, LLAMA_KV_HEADS, 8, LLAMA_HEAD_DIM] for n in KV_NAMES},
}


@register(
    "llama_kv_dynamo",
    "same Llama as llama_dynamo (same seed, same weights) with its KV cache, in the "
    "decoder-with-past convention of Optimum / ONNX Runtime GenAI: input_ids, attention_mask, "
    "position_ids, past_key_values.N.key/value -> logits, present.N.key/value; dynamic batch, "
    "sequence and past dims (the sidecar runs batch 1, sequence 8, past 8)",
    "dynamo",
    notes="a cache Concat per layer (present = past + new K/V); the causal and padding mask "
    "built at run time from the dims (Range/LessOrEqual/GatherND/And/Where), not folded to a "
    "constant as in llama_dynamo; rotary cos/sin computed at run time from position_ids (Mul "
    "by inv_freq, Cos/Sin); a prefill with past length 0 runs in onnxruntime",
    int_ranges={
        "input_ids": (0, LLAMA_VOCAB),
        "attention_mask": (0, 2),
        "position_ids": (0, LLAMA_MAX_POSITIONS),
    },
)
def build_llama_kv_dynamo(path, built):
    from transformers import LlamaConfig, LlamaForCausalLM

    seed_all()
    cfg = LlamaConfig(
        vocab_size=LLAMA_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LLAMA_KV_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=LLAMA_KV_HEADS,
        max_position_embeddings=LLAMA_MAX_POSITIONS,
        use_cache=True,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    module = LlamaWithPast(LlamaForCausalLM(cfg)).eval()
    dim = torch.export.Dim
    batch, seq, past = dim("batch_size"), dim("sequence_length"), dim("past_sequence_length")
    dynamic = (
        {0: batch, 1: seq},
        {0: batch, 1: dim("total_sequence_length")},
        {0: batch, 1: seq},
        tuple({0: batch, 2: past} for _ in KV_NAMES),
    )
    # Distinct sizes above 1: torch.export would specialize a dim of 1 and tie equal ones.
    ids, mask, positions, cache = _llama_kv_feed(2, 5, 3)
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            (ids, mask, positions, cache),
            dynamo=True,
            opset_version=DYNAMO_OPSET,
            input_names=KV_INPUTS,
            output_names=KV_OUTPUTS,
            dynamic_shapes=dynamic,
            optimize=True,
            external_data=False,
        )
        program.save(str(path), external_data=False)
    _inline_weights(path)
    _check_llama_kv(module, path)


# --------------------------------------------------------------------------------------------
# Verification and documentation
# --------------------------------------------------------------------------------------------


def _iter_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _iter_nodes(g)


_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def random_feed(sess, int_ranges, rng, run_shapes=None):
    """Random inputs; a dynamic input takes its shape from ``run_shapes`` (see RUN_SHAPES)."""
    feed = {}
    for i in sess.get_inputs():
        dt = _DTYPES[i.type]
        shape = (run_shapes or {}).get(i.name, i.shape)
        if any(not isinstance(d, int) for d in shape):
            raise RuntimeError(f"input {i.name} has a symbolic shape {i.shape}")
        if np.issubdtype(dt, np.integer):
            lo, hi = int_ranges[i.name]
            feed[i.name] = rng.integers(lo, hi, size=shape, dtype=dt)
        else:
            feed[i.name] = rng.standard_normal(shape).astype(dt)
    return feed


def verify(entry: Entry, path: Path) -> dict:
    """Check, shape-infer and run the model once; return its manifest record."""
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        raise RuntimeError(f"{path.name} keeps weights outside the file")
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    run_shapes = RUN_SHAPES.get(entry.name, {})
    feed = random_feed(sess, entry.int_ranges, rng, run_shapes)
    # Also the data the project makes when no sidecar bounds an integer input: all zeros.
    zeros = {
        k: (np.zeros_like(v) if np.issubdtype(v.dtype, np.integer) else v) for k, v in feed.items()
    }
    for run_feed in (feed, zeros):
        outs = sess.run(None, run_feed)
        for o, meta in zip(outs, sess.get_outputs(), strict=True):
            if not np.all(np.isfinite(o)):
                raise RuntimeError(f"{path.name}: output {meta.name} is not finite")
    nodes = list(_iter_nodes(model.graph))
    op_counts = collections.Counter(
        (n.domain + "." if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in nodes
    )
    used = {n.domain or "ai.onnx" for n in nodes}
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    return {
        "file": path.name,
        "architecture": entry.architecture,
        "exporter": entry.exporter,
        "derived_from": list(entry.needs),
        "notes": entry.notes,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "ir_version": model.ir_version,
        "opset": opsets,
        "opset_domains_used": sorted(used),
        "size_bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "nodes_top_level": len(model.graph.node),
        "nodes_total": len(nodes),
        "inferred_value_infos": len(inferred.graph.value_info),
        "op_types": dict(sorted(op_counts.items())),
        "inputs": [
            {
                "name": i.name,
                "dtype": i.type.removeprefix("tensor(").removesuffix(")"),
                "shape": list(i.shape),
                **({"run_shape": run_shapes[i.name]} if i.name in run_shapes else {}),
                **(
                    {"valid_range": list(entry.int_ranges[i.name])}
                    if i.name in entry.int_ranges
                    else {}
                ),
            }
            for i in sess.get_inputs()
        ],
        "outputs": [
            {
                "name": o.name,
                "dtype": o.type.removeprefix("tensor(").removesuffix(")"),
                "shape": list(o.shape),
            }
            for o in sess.get_outputs()
        ],
        "node_name_examples": _name_examples(model.graph),
    }


def _name_examples(graph, k=3):
    """A few node names of the heaviest op types, to show the exporter's naming style."""
    picks = []
    for op in (
        "Conv",
        "MatMul",
        "Gemm",
        "QLinearConv",
        "MatMulInteger",
        "Attention",
        "Loop",
        "If",
        "Scan",
        "LayerNormalization",
        "SkipLayerNormalization",
    ):
        names = [n.name for n in graph.node if n.op_type == op]
        if names:
            picks.extend(names[:k] if len(picks) < 2 else names[:1])
        if len(picks) >= 4:
            break
    return picks[:4]


_NOTABLE = (
    "Conv",
    "ConvTranspose",
    "Resize",
    "MatMul",
    "Gemm",
    "Softmax",
    "LayerNormalization",
    "Erf",
    "Gelu",
    "If",
    "Loop",
    "Scan",
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "MatMulInteger",
    "DynamicQuantizeLinear",
    "Sigmoid",
    "Clip",
    "Pad",
)


def _op_summary(rec, model_path: Path) -> str:
    ops = rec["op_types"]
    parts = []
    model = onnx.load(str(model_path))
    # Depthwise / grouped convolutions.
    dw = grp = 0
    for n in _iter_nodes(model.graph):
        if n.op_type in ("Conv", "QLinearConv"):
            g = next((a.i for a in n.attribute if a.name == "group"), 1)
            if g > 1:
                w_name = n.input[1] if n.op_type == "Conv" else n.input[3]
                init = next((t for t in model.graph.initializer if t.name == w_name), None)
                if init is not None and init.dims[1] == 1:
                    dw += 1
                else:
                    grp += 1
    if dw:
        parts.append(f"{dw} depthwise conv (group=C)")
    if grp:
        parts.append(f"{grp} grouped conv")
    for op, c in ops.items():
        short = op.split(".")[-1]
        if op.startswith("com.microsoft.") or short in _NOTABLE:
            parts.append(f"{op} x{c}")
    return ", ".join(parts)


def write_sidecar(entry: Entry, rec: dict, out: Path) -> None:
    """``<model>.json`` beside the model, in the project's sidecar format (see
    ``aaco_pipelines/registry/sidecar.py``): the bounds of its integer inputs, so generated ids
    stay in the vocabulary, the shapes its dynamic inputs run at, and tags naming the family and
    the exporter."""
    inputs = {
        i["name"]: {
            "shape": i.get("run_shape", i["shape"]),
            "dtype": {"float": "float32", "double": "float64"}.get(i["dtype"], i["dtype"]),
            **(
                {"low": i["valid_range"][0], "high": i["valid_range"][1]}
                if "valid_range" in i
                else {}
            ),
        }
        for i in rec["inputs"]
        if "valid_range" in i or "run_shape" in i
    }
    sidecar = {
        **({"inputs": inputs} if inputs else {}),
        "tags": {
            "family": "control_flow"
            if entry.name.startswith("control_flow")
            else entry.name.split("_")[0],
            "exporter": entry.exporter,
            "corpus": "real_models",
        },
    }
    (out / rec["file"]).with_suffix(".json").write_text(json.dumps(sidecar, indent=2) + "\n")


NAME_STYLES = [
    "**torchscript**: one node per traced op, named by module scope, `/<module path>/<OpType>` "
    "with `_<n>` for repeats: `/encoder/layer.0/attention/self/query/MatMul`, "
    "`/resnet/encoder/stages.0/layers.0/layer/layer.0/convolution/Conv`, `/Loop`, `/If_1`; ops "
    "outside any submodule sit at the root (`/Cast`, `/Where_1`: the attention-mask prologue of "
    "BERT). Tensors are `<node>_output_0`; weights keep their state-dict names "
    "(`encoder.layer.0.attention.self.query.bias`) or `onnx::MatMul_312` for transposed copies; "
    "`Identity_<n>` nodes alias initializers shared between parameters.",
    "**dynamo**: flat names `node_<op>_<n>` from the FX node (`node_linear_1`, `node_conv2d_3`, "
    "`node_view`) or from the ONNX op the torchlib function emitted (`node_Conv_302`, "
    "`node_MatMul_10`, `node_Sqrt_107`); no module path in the name. The module path is in each "
    "node's `metadata_props` (`pkg.torch.onnx.name_scopes`, `namespace`, `class_hierarchy`, "
    "`fx_node`, `stack_trace`, about 200 KB per model); `torch.cond` becomes "
    "`If` `node_cond__0`.",
    "**onnxruntime.quantization**: QOperator and dynamic keep the float node's name plus `_quant` "
    "(`/mobilenet_v2/layer.1/Add_quant`, `/encoder/layer.0/attention/self/key/MatMul_quant`), "
    "with helpers `<tensor>_QuantizeLinear` and `<node>_quant_scales_mul`; QDQ keeps the float "
    "nodes' names and adds `<tensor>_QuantizeLinear` / `<tensor>_DequantizeLinear` "
    "(`onnx::Conv_201_DequantizeLinear`).",
    "**onnxruntime.transformers optimizer**: fused nodes get new short names (`Attention_0`, "
    "`SkipLayerNorm_AddBias_0`, `Gelu_AddBias_0` for BiasGelu, `MaskReduceSum_0`); unfused "
    "nodes keep the TorchScript names.",
    "**onnx.helper**: the names written by hand (`rnn/Scan`, `scan_body/MatMul_x`).",
]


def write_docs(out: Path, records: list[dict], command: str) -> None:
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
    }
    for mod in ("transformers", "onnxscript", "onnx_ir"):
        with contextlib.suppress(Exception):
            versions[mod] = __import__(mod).__version__
    manifest = {
        "generator": "benchmarks/real_models/export_corpus.py",
        "command": command,
        "seed": SEED,
        "versions": versions,
        "models": records,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

    lines = [
        "# Real ONNX models",
        "",
        "Small but real architectures exported by real exporters, to test the kernel attribution "
        "against graphs this project did not draw itself. Random weights from fixed seeds; "
        "shrunk by narrow widths, few layers and small inputs, with the real topology and the "
        "exporters' own node naming. Every model but `llama_kv_dynamo.onnx` has fixed input "
        "shapes, keeps its weights inside the file, passes `onnx.checker.check_model(full_check=True)` and strict "
        "`onnx.shape_inference.infer_shapes`, and ran in onnxruntime (CPU, `ORT_ENABLE_ALL`) on "
        "random inputs and on all-zero integer inputs with finite outputs. Regenerating with the "
        "versions below gives byte-identical files (the dynamo exports embed stack traces with "
        "the script's paths and line numbers: editing the script changes their bytes, not their "
        "graphs).",
        "",
        "Regenerate (under a minute on 2 cores), from the repository root:",
        "",
        "```sh",
        "python3 -m venv /work/torch-venv",
        "/work/torch-venv/bin/pip install torch==2.13.0 transformers==5.24.0 onnx==1.23.2 \\",
        "    onnxscript==0.7.2 onnx-ir==1.1.0 onnxruntime-rocm==1.22.2.post3 numpy==2.4.6 "
        "coloredlogs",
        "/work/torch-venv/bin/python benchmarks/real_models/export_corpus.py "
        "--out tests/data/real_models",
        "```",
        "",
        "Beside each `<model>.onnx` is `<model>.json`, a sidecar in the project's format "
        "(`aaco_pipelines/registry/sidecar.py`): the `low`/`high` of every int64 input, so "
        "generated ids stay inside the vocabulary, the shapes dynamic inputs run at, and tags. `manifest.json` holds the facts of "
        "this page in machine form (every op-type count, input and output shapes, valid ranges, "
        "sha256 of each file, versions).",
        "",
        "Exporters: **torchscript** = `torch.onnx.export(..., dynamo=False)`; **dynamo** = "
        "`torch.onnx.export(..., dynamo=True)` (its onnxscript optimizer on, the default); "
        "**onnxruntime.quantization** = `quantize_static` / `quantize_dynamic` after "
        "`quant_pre_process`; **onnxruntime.transformers optimizer** = `optimize_model`; "
        "**onnx.helper** = built by hand. Hugging Face models are built from config objects "
        "(`transformers`), never downloaded; eager attention throughout.",
        "",
        "| file | architecture | exporter | opset | size | nodes (all / top level) | "
        "ops of note (all subgraphs) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        opset = ", ".join(
            f"{k} {v}" if k != "ai.onnx" else str(v)
            for k, v in r["opset"].items()
            if k == "ai.onnx" or k in r["opset_domains_used"]
        )
        source = ""
        if r["derived_from"]:
            source = " of " + ", ".join(f"`{d}.onnx`" for d in r["derived_from"])
        lines.append(
            f"| `{r['file']}` | {r['architecture']} | {r['exporter']}{source} | {opset} | "
            f"{r['size_bytes'] / 1e6:.2f} MB | {r['nodes_total']} / {r['nodes_top_level']} | "
            f"{r['op_summary']} |"
        )
    total = sum(r["size_bytes"] for r in records)
    lines += [
        "",
        f"Total: {len(records)} models, {total / 1e6:.2f} MB.",
        "",
        "## Inputs and outputs",
        "",
        "Float inputs take any values (the checks used standard normal). An int64 input takes "
        "any value in its range [lo, hi): token ids any id of the small vocabulary. The "
        "attention masks are 0/1 (1 = attend); all-zero masks also run. Larger mask values run "
        "to finite outputs in every BERT but `bert_classic_ts.onnx`, whose (1 - m) * min "
        "overflows to inf for m > 1.",
        "",
        "| file | inputs (name: dtype [shape] range) | outputs | node names (examples) |",
        "| --- | --- | --- | --- |",
    ]
    for r in records:
        ins = "<br>".join(
            f"`{i['name']}`: {i['dtype']} {i['shape']}"
            + (f" in [{i['valid_range'][0]}, {i['valid_range'][1]})" if "valid_range" in i else "")
            + (f", runs at {i['run_shape']}" if "run_shape" in i else "")
            for i in r["inputs"]
        )
        outs = "<br>".join(f"`{o['name']}`: {o['dtype']} {o['shape']}" for o in r["outputs"])
        names = "<br>".join(f"`{n}`" for n in r["node_name_examples"])
        lines.append(f"| `{r['file']}` | {ins} | {outs} | {names} |")
    lines += [
        "",
        "`control_flow_ts.onnx`'s output keeps the symbolic first dimension `Ify_dim_0` that the "
        "TorchScript exporter gives the result of an `If` (it is 4 at run time); its input is "
        "fixed like every other.",
        "",
        "`llama_kv_dynamo.onnx` is the one model with dynamic inputs, as a generation runtime "
        "feeds it: a prefill passes the prompt with empty past tensors (past length 0), each "
        "decode step one token with the previous step's presents as past, and attention_mask "
        "covers past + new positions. The exporter names the presents' length "
        "`past_sequence_length + sequence_length` (once in the other order). Its sidecar and the checks run it at batch 1, "
        "sequence 8, past 8 (`run_shape` in the manifest); the build also checks it against the "
        "PyTorch model in onnxruntime for a prefill with past length 0 and a decode step.",
        "",
        "## Node names by exporter",
        "",
        *[f"- {s}" for s in NAME_STYLES],
        "",
        "## Notes",
        "",
    ]
    for r in records:
        if r["notes"]:
            lines.append(f"- `{r['file']}`: {r['notes']}.")
    lines += [
        "",
        "Not in the corpus: an `EmbedLayerNormalization` (see `bert_ort_fused.onnx`); a Scan from "
        "a PyTorch exporter (neither emits one, hence the hand-built "
        "`control_flow_scan_helper.onnx`); torchvision models (torchvision does not import beside "
        "this torch build; the vision models come from `transformers` or plain `torch.nn`).",
        "",
        "## Versions",
        "",
        ", ".join(f"{k} {v}" for k, v in versions.items()) + f"; seed {SEED}.",
        "",
        f"Made with: `{command}`",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tests/data/real_models"))
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--no-docs", action="store_true", help="do not write README/manifest")
    args = parser.parse_args(argv)
    # The exporters and optimizers log every pass at INFO; keep the console to one line a model.
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    if args.list:
        for e in REGISTRY.values():
            print(f"{e.name:28s} {e.exporter:36s} {e.architecture}")
        return 0
    wanted = [n for n in args.only.split(",") if n] or list(REGISTRY)
    unknown = [n for n in wanted if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")

    args.out.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    records = []
    with tempfile.TemporaryDirectory() as scratch:

        def ensure(name: str, keep: bool) -> None:
            if name in built:
                return
            entry = REGISTRY[name]
            for dep in entry.needs:
                ensure(dep, dep in wanted)
            dst = (args.out if keep else Path(scratch)) / f"{name}.onnx"
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                entry.build(dst, built)
            built[name] = dst
            if keep:
                rec = verify(entry, dst)
                rec["op_summary"] = _op_summary(rec, dst)
                records.append(rec)
                write_sidecar(entry, rec, args.out)
                print(
                    f"{dst.name:32s} {rec['size_bytes'] / 1e6:6.2f} MB {rec['nodes_total']:5d} "
                    f"nodes {time.perf_counter() - t0:5.1f}s",
                    file=sys.stderr,
                    flush=True,
                )

        for name in wanted:
            ensure(name, True)

    manifest_path = args.out / "manifest.json"
    if manifest_path.exists() and len(wanted) < len(REGISTRY):
        # A partial run keeps the records of the models it did not rebuild.
        done = {r["file"] for r in records}
        for old in json.loads(manifest_path.read_text()).get("models", []):
            if old["file"] not in done and (args.out / old["file"]).exists():
                records.append(old)
    order = list(REGISTRY)
    records.sort(key=lambda r: order.index(r["file"].removesuffix(".onnx")))
    if not args.no_docs:
        script = "benchmarks/real_models/export_corpus.py"
        command = " ".join([sys.executable, script, *(sys.argv[1:] if argv is None else argv)])
        write_docs(args.out, records, command)
    for stray in args.out.glob("*.data"):
        stray.unlink()
    shutil.rmtree(args.out / "__pycache__", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
