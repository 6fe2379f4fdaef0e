"""Precision recipes as data: bytes per parameter of the model states (a `Precision`), and for FP8 and FP4 recipes a
`LowPrecision` part that says which GEMM weights have quantized copies, how each is laid out (data, transposed
copies, scale tensors), what scaling state a GEMM keeps, and how a linear op keeps its input for backward.

Sources are pinned: TransformerEngine at commit d0067d0 (2026-08-22, `TE`), torchao at tag v0.18.0
(5f2baf9, `AO`), and the DeepSeek-V3 technical report (arXiv 2412.19437, sections 3.3.2 and 3.3.4).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from symmem.graph import FP32, Dataflow, Op, Tensor
from symmem.precision.encoding import Encoding
from symmem.precision.formats import E2M1, E4M3, E5M6
from symmem.precision.model_states import Precision
from symmem.precision.saved import eligible, input_copy, quantized
from symmem.precision.scales import TE_SCALES, Blocks
from symmem.rules import Saved

TE = "TE d0067d0 transformer_engine/pytorch"
AO = "torchao v0.18.0 torchao/float8"
V3 = "DeepSeek-V3 report (arXiv 2412.19437)"


@dataclass(frozen=True)
class LowPrecision:
    """What an FP8/FP4 recipe adds to the BF16 accounting."""

    name: str
    title: str = ""  # one line, for --help and tables
    # How an eligible linear op (`symmem.precision.saved.eligible`) keeps its input for backward; None: as the rule
    # set says (high precision).
    gemm_input: Encoding | None = None
    # The input of the linear after the attention core, when it is kept otherwise (DeepSeek's E5M6).
    attention_output: Encoding | None = None
    # DeepSeek-V3: the MoE SwiGLU's inputs kept in this encoding, its output recomputed in backward.
    moe_swiglu: Encoding | None = None
    # Quantized copies of every eligible GEMM weight kept across micro-batches, as (weight group or "*", copies).
    weight_copies: tuple[tuple[str, tuple[Encoding, ...]], ...] = ()
    drops_hp_weight: bool = False  # eligible weights keep no high-precision working copy (their FP8 copy is it)
    amax_history: int = 0  # TE delayed scaling: amax history length per GEMM tensor (0: no scaling state)
    gemm: str = "fp8"  # the tensor-core format its eligible GEMMs run in (the step-time model's throughput)
    # of an eligible GEMM's forward, input-gradient and weight-gradient products, the share run in `gemm`
    low_passes: tuple[int, int] = (3, 3)
    # TE c188b533 pytorch/quantization.py:48-58 check_fp8_support: 8.9 (Ada) or higher; MX and NV formats 10.0
    min_compute_capability: tuple[int, int] = (8, 9)
    notes: tuple[str, ...] = field(default=())  # sources and assumptions, one line each
    # FSDP2 gathers the Float8 linears' weights in float8 (torchao's `enable_fsdp_float8_all_gather`): None, or
    # which linears are Float8 modules (`Float8AllGather`)
    fsdp_float8_all_gather: Float8AllGather | None = None

    @property
    def changes_saved(self) -> bool:
        return (any(e is not None for e in (self.gemm_input, self.attention_output, self.moe_swiglu))
                or self.fsdp_float8_all_gather is not None)

    def copies_for(self, group: str) -> tuple[Encoding, ...]:
        for g, encs in self.weight_copies:
            if g in (group, "*"):
                return encs
        return ()

    def scaling_state_bytes_per_gemm(self) -> int:
        """TE delayed scaling: each GEMM keeps 3 forward (input, weight, output) and 2 backward (grad output,
        grad input) FP32 scales and an FP32 amax history of that many columns (TE pytorch/module/base.py:1137-1139,
        pytorch/quantization.py:1436-1442)."""
        return 4 * 5 * (1 + self.amax_history) if self.amax_history else 0

    def transform(self, op: Op, flow: Dataflow, saved: list[Saved]) -> list[Saved]:
        """What `op` keeps under this recipe, from what the rule set says it keeps at high precision."""
        swiglu = self.moe_swiglu is not None and op.block == "moe"
        out: list[Saved] = []
        for sv in saved:
            t = sv.tensor
            if self.gemm_input is not None and eligible(op) and t.name == op.inputs[0]:
                src = flow.producer(t.name)
                if swiglu and src is not None and "swiglu" in src.tags:
                    continue  # the SwiGLU output: recomputed from its cached inputs in backward (report 3.3.4)
                after_attention = src is not None and "core_attention" in src.tags
                enc = self.attention_output if after_attention and self.attention_output else self.gemm_input
                out.append(Saved(input_copy(op, flow, enc), f"{sv.why}, kept as {enc.name}"))
            elif swiglu and "swiglu" in op.tags and t.name in flow.tensors:
                src = flow.producer(t.name)
                if src is not None and "swiglu" in src.tags:
                    continue  # made inside the SwiGLU: recomputed in backward
                out.append(Saved(quantized(t, self.moe_swiglu), f"{sv.why}, kept as {self.moe_swiglu.name}"))
            else:
                out.append(sv)
        ag = self.fsdp_float8_all_gather
        if ag is not None and ag.owns_scale(op) and saved:
            # FSDP2 frees a float8-gathered weight's data at the reshard (resize to 0); its FP32 scale lives on in
            # the unsharded parameter (and in the saved transposed view, AO/float8_linear.py:45) until the backward
            out.append(Saved(weight_scale(op), f"{op.name}: the float8-gathered weight's scale ({AO}/fsdp_utils.py:"
                                               "248-251, 253-285)"))
        return out


@dataclass(frozen=True)
class Float8AllGather:
    """Which linears FSDP2 gathers in float8 under torchao's `enable_fsdp_float8_all_gather`: the Float8Linear
    modules. `fused_qkv`: q, k and v are one module (torchtitan 0.3.0's wqkv: one weight, one scale); `head`: the
    output projection is one (torchtitan 0.3.0 converts every Linear whose dims are multiples of 16, no FQN filtered
    by default: torchtitan/components/quantization/float8.py:62, utils.py:16-30; 9dec370 left "output" out)."""

    fused_qkv: bool
    head: bool

    def is_float8(self, op: Op) -> bool:
        return op.kind == "linear" and bool(op.weights) and (eligible(op) or (self.head and op.name.endswith(
            "lm_head")))

    def owns_scale(self, op: Op) -> bool:
        """Whether `op`'s module has a weight scale of its own (one per Float8Linear; wqkv's is q's)."""
        return self.is_float8(op) and not (self.fused_qkv and op.name.endswith(("k_proj", "v_proj")))


def weight_scale(op: Op) -> Tensor:
    """The FP32 scalar scale of a float8-gathered weight (tensorwise scaling: one per weight, 4 bytes). FSDP2's
    unsharded parameter, a Float8TrainingTensor, keeps it after the reshard frees its data, until the backward's
    all-gather puts the next in its place (fsdp_utils.py:253-285, `out._scale = scale` at :267): alive from the layer's
    forward to its backward whatever the checkpointing. So it is named after the weight, which no op makes, and a
    recomputation policy keeps it (`activations.kept_tensors`); the autograd graph's saved view holds the same
    tensor when the layer is not recomputed."""
    return Tensor(f"{op.weights[0].name}.float8_weight_scale", (), FP32)


def with_fsdp_float8_all_gather(precision: Precision, fused_qkv: bool, head: bool) -> Precision:
    """`precision` (torchao's tensorwise recipe) with FSDP2's float8 all-gather of its Float8 linears' weights."""
    lp = precision.low_precision
    ag = Float8AllGather(fused_qkv, head)
    note = (f"{AO}/fsdp_utils.py:228-285: FSDP2 casts each weight's FP32 shard to float8 before the all-gather "
            "(the scale from the amax all-reduced over the shard group) and gathers 1 byte per element; the gathered "
            "weight is a Float8TrainingTensor with one FP32 scale, which its saved transposed view keeps")
    return dataclasses.replace(
        precision, name=f"{precision.name}+fsdp-float8-all-gather",
        low_precision=dataclasses.replace(lp, name=f"{lp.name}+fsdp-float8-all-gather", fsdp_float8_all_gather=ag,
                                          title=f"{lp.title}; FSDP2 gathers the Float8 weights in float8",
                                          notes=lp.notes + (note,)))


# ---------------------------------------------------------------------------------------------- encodings
# TE per-tensor FP8 (delayed and current scaling) on Hopper: a Float8Tensor holds `_data` [m, k] and, for
# column-wise use, `_transpose` [k, m], both one byte per element, and one FP32 `_scale_inv`
# (TE tensor/float8_tensor.py:414-430; on Blackwell one `_data` serves both, 423-427).
_PT_ROW = Encoding("e4m3 per-tensor", E4M3, None, per_tensor=4, source=f"{TE}/tensor/float8_tensor.py:424-429")
_PT_COL = Encoding("e4m3 per-tensor, transposed", E4M3, None, per_tensor=4, transposed=True,
                   source=f"{TE}/tensor/float8_tensor.py:426-429")
_PT_COL_SHARED = Encoding("e4m3 transpose", E4M3, None, transposed=True,
                          source=f"{TE}/tensor/float8_tensor.py:426-427 (one _scale_inv with _data)")
# Scale-tensor shapes of TE's block formats: symmem.precision.scales.TE_SCALES (read at TE c188b533, 2.11.0).
# TE blockwise FP8 (Float8BlockScaling): FP32 scales; 1x128 for activations, 128x128 for weights
# (common/recipe/__init__.py:435-436); scale shapes tensor/float8_blockwise_tensor.py:194-211, column-wise data
# transposed (213-233).
_BW_ACT_COL = Encoding("e4m3 128x1 (1x128 of the transpose)", E4M3, TE_SCALES["fp8_block_1d", True], transposed=True,
                       source=f"{TE}/tensor/float8_blockwise_tensor.py:202-207")
_BW_W_ROW = Encoding("e4m3 128x128", E4M3, TE_SCALES["fp8_block_2d", False],
                     source=f"{TE}/tensor/float8_blockwise_tensor.py:195-200")
_BW_W_COL = Encoding("e4m3 128x128, transposed", E4M3, TE_SCALES["fp8_block_2d", True], transposed=True,
                     source=f"{TE}/tensor/float8_blockwise_tensor.py:195-199")
# TE MXFP8: 32-element blocks (constants.py:175), E8M0 one-byte scales padded to 128x4 tiles
# (tensor/mxfp8_tensor.py:164-176); column-wise data keeps the row-wise shape (178-180).
_MX_ROW = Encoding("mxfp8 1x32", E4M3, TE_SCALES["mxfp8", False], source=f"{TE}/tensor/mxfp8_tensor.py:171-176")
_MX_COL = Encoding("mxfp8 32x1", E4M3, TE_SCALES["mxfp8", True], source=f"{TE}/tensor/mxfp8_tensor.py:164-170")
# TE NVFP4: FP4 E2M1 packed two per byte along the last dimension (tensor/nvfp4_tensor.py:335-340), 16-element
# blocks (constants.py:177) with E4M3 one-byte scales padded to 128x4 tiles (273-307), and one FP32 amax per usage
# (394-398); column-wise data transposed (310-333). Weights use 16x16 2-D blocks (common/recipe/__init__.py:510-511),
# stored in the same scale layout.
_NV_ROW = Encoding("nvfp4 1x16", E2M1, TE_SCALES["nvfp4", False], per_tensor=4,
                   source=f"{TE}/tensor/nvfp4_tensor.py:379-396")
_NV_COL = Encoding("nvfp4 16x1, transposed", E2M1, TE_SCALES["nvfp4", True], per_tensor=4, transposed=True,
                   source=f"{TE}/tensor/nvfp4_tensor.py:385-398")
# DeepSeek-V3: 1x128 tiles for activations, 128x128 blocks for weights (report sec. 3.3.2; the released config's
# quantization_config.weight_block_size = [128, 128], symmem/presets/deepseek-v3.json:32-40), one scale per tile
# or block; the scale format is not given in the report: FP32 is assumed, as the released checkpoint stores its
# weight_scale_inv; no padding (DeepSeek's own kernels, not described).
_DS_ACT = Encoding("e4m3 1x128", E4M3, Blocks(1, 128, 4), source=f"{V3} sec. 3.3.2, 3.3.4")
_DS_ATTN = Encoding("e5m6 1x128", E5M6, Blocks(1, 128, 4), source=f"{V3} sec. 3.3.4 (1)")
_DS_W = Encoding("e4m3 128x128", E4M3, Blocks(128, 128, 4), source=f"{V3} sec. 3.3.2")

_TE_SAVED = (f"a linear op keeps only the column-wise copy of its quantized input for the weight gradient "
             f"({TE}/module/linear.py:428-436 quantizes row- and column-wise, 600-621 drops the row-wise data)")
_TE_WEIGHTS = (f"each TE linear caches its quantized weight (row- and column-wise usage when gradients are needed) "
               f"across micro-batches when given is_first_microbatch, as Megatron-Core does ({TE}/module/"
               "linear.py:466-489, 1958-1961, 2071); the BF16 parameter stays (non-FP8 parameters: Megatron "
               "without --fp8-param-gather)")
_TE_STATES = "model states as Megatron mixed precision: BF16 weights 2, FP32 main gradients 4, FP32 master 4, Adam 8"
_EXCLUDED = ("the MoE router and the output head stay BF16 (Megatron-Core builds them as torch linears, not TE "
             "modules; DeepSeek-V3 report sec. 3.3: gating and output head keep their precision)")

RECIPES: dict[str, Precision] = {}


def _add(name: str, states: Precision, lp: LowPrecision, title: str) -> None:
    RECIPES[name] = Precision(name, states.weight_bytes, states.grad_bytes, states.master_bytes,
                              states.optimizer_bytes, low_precision=dataclasses.replace(lp, title=title))


_MEGATRON = (2, 4, 4, 8)
_add("te-delayed", Precision("te-delayed", *_MEGATRON), LowPrecision(
    "te-delayed", gemm_input=_PT_COL, weight_copies=(("*", (_PT_ROW, _PT_COL_SHARED)),), amax_history=1024,
    notes=(_TE_SAVED, _TE_WEIGHTS, f"DelayedScaling: amax_history_len 1024 ({TE.replace('/pytorch', '')}/common/"
           "recipe/__init__.py:255), 5 FP32 scales and 5 amax histories per GEMM", _TE_STATES, _EXCLUDED,
           "Hopper layout: a transposed FP8 copy for column-wise use")),
     "TransformerEngine FP8, per-tensor delayed scaling (Hopper)")
_add("te-current", Precision("te-current", *_MEGATRON), LowPrecision(
    "te-current", gemm_input=_PT_COL, weight_copies=(("*", (_PT_ROW, _PT_COL_SHARED)),),
    notes=(_TE_SAVED, _TE_WEIGHTS, f"Float8CurrentScaling keeps no scaling state ({TE}/quantization.py:1454-1485)",
           _TE_STATES, _EXCLUDED, "Hopper layout: a transposed FP8 copy for column-wise use")),
     "TransformerEngine FP8, per-tensor current scaling (Hopper)")
_add("te-blockwise", Precision("te-blockwise", *_MEGATRON), LowPrecision(
    "te-blockwise", gemm_input=_BW_ACT_COL, weight_copies=(("*", (_BW_W_ROW, _BW_W_COL)),),
    notes=(_TE_SAVED, _TE_WEIGHTS, "Float8BlockScaling: 1x128 activations, 128x128 weights, FP32 scales",
           _TE_STATES, _EXCLUDED)),
     "TransformerEngine FP8 blockwise (1x128 activations, 128x128 weights; DeepSeek-V3's tiling)")
_add("te-mxfp8", Precision("te-mxfp8", *_MEGATRON), LowPrecision(
    "te-mxfp8", gemm_input=_MX_COL, weight_copies=(("*", (_MX_ROW, _MX_COL)),),
    min_compute_capability=(10, 0),  # TE c188b533 pytorch/quantization.py:62-68 check_mxfp8_support
    notes=(_TE_SAVED, _TE_WEIGHTS, "MXFP8BlockScaling: 32-element blocks, E8M0 scales padded to 128x4",
           _TE_STATES, _EXCLUDED)),
     "TransformerEngine MXFP8 (Blackwell: 32-element blocks, E8M0 scales)")
_add("te-nvfp4", Precision("te-nvfp4", *_MEGATRON), LowPrecision(
    "te-nvfp4", gemm_input=_NV_COL, weight_copies=(("*", (_NV_ROW, _NV_COL)),), gemm="fp4",
    min_compute_capability=(10, 0),  # TE c188b533 pytorch/quantization.py:72-76 check_nvfp4_support
    notes=(_TE_SAVED, _TE_WEIGHTS, "NVFP4BlockScaling: FP4 E2M1 data, 16-element blocks with E4M3 scales padded "
           "to 128x4, one FP32 amax per copy", _TE_STATES, _EXCLUDED,
           "all eligible GEMMs in NVFP4 (runs that keep some layers in BF16 or MXFP8 are not modelled)")),
     "TransformerEngine NVFP4 (Blackwell: FP4 data, 16-element blocks, E4M3 scales + FP32 amax)")
_add("deepseek-v3-fp8", Precision("deepseek-v3-fp8", 2, 4, 4, 4), LowPrecision(
    "deepseek-v3-fp8", gemm_input=_DS_ACT, attention_output=_DS_ATTN, moe_swiglu=_DS_ACT,
    weight_copies=(("*", (_DS_W,)),), drops_hp_weight=True,
    notes=(f"{V3} sec. 3.3 / Figure 6: Fprop, Dgrad and Wgrad GEMMs in FP8 from an FP8 weight; the embedding, "
           "output head, MoE gating, normalization and attention operators keep BF16/FP32",
           f"{V3} sec. 3.3.4: activations cached in FP8 for the linear's backward, 1x128 tiles (sec. 3.3.2); the "
           "input of the linear after attention in E5M6; the MoE SwiGLU's inputs cached in FP8, its output "
           "recomputed in backward",
           f"{V3} sec. 3.3.4: AdamW moments in BF16 (2 + 2 bytes), master weights and gradients in FP32 (4 + 4)",
           "assumed (not in the report): one FP8 copy of each FP8 weight with 128x128 FP32 scales, kept across "
           "micro-batches, and no BF16 working copy of it; BF16 working copies (2 bytes) of the weights that stay "
           "BF16; E5M6 packed at 12 bits per element; FP32 activation scales, unpadded")),
     "DeepSeek-V3's FP8 recipe (report sec. 3.3): FP8 GEMMs, FP8-cached activations, BF16 moments")
# torchao float8 training (torchtitan's FP8 path): Float8Linear casts its input and weight to float8 in each forward
# and keeps the high-precision input and weight for backward (AO/float8_linear.py:45, 51-83); dynamic scaling only
# (config.py:19-32: no amax history or scale buffers since delayed scaling was removed). No option of
# Float8LinearConfig changes what is saved on one device (`force_recompute_fp8_weight_in_bwd` has no effect,
# config.py:236-239; `enable_fsdp_float8_all_gather` changes the FSDP2 all-gather, not the single-device saves).
_AO_NOTES = (f"{AO}/float8_linear.py:45: ctx.save_for_backward(input_hp, weight_hp_t): the high-precision input "
             "and weight are kept; FP8 casts (51-83) are transients of the forward and backward",
             f"{AO}/config.py:19-32: dynamic scaling only, no scaling state",
             f"{AO}/config.py:236-239: force_recompute_fp8_weight_in_bwd has no effect",
             "model states as torchtitan's FSDP2 training keeps them: FP32 parameters 4 (they are the master), FP32 "
             "gradients 4, AdamW FP32 moments 8; the transient BF16 all-gathered weights are not counted")
_add("torchao-float8-tensorwise", Precision("torchao-float8-tensorwise", 4, 4, 0, 8),
     LowPrecision("torchao-float8-tensorwise", notes=(f"{AO}/config.py:331-332: the tensorwise recipe is the "
                                                       "default Float8LinearConfig()",) + _AO_NOTES),
     "torchao float8 training, tensorwise scaling (keeps high-precision inputs for backward)")
_add("torchao-float8-rowwise", Precision("torchao-float8-rowwise", 4, 4, 0, 8),
     LowPrecision("torchao-float8-rowwise", notes=(f"{AO}/config.py:334-351: the rowwise recipe (axiswise scales, "
                                                    "power-of-two scales)",) + _AO_NOTES),
     "torchao float8 training, rowwise scaling (keeps high-precision inputs for backward)")
_add("torchao-float8-rowwise-gw-hp", Precision("torchao-float8-rowwise-gw-hp", 4, 4, 0, 8),
     LowPrecision("torchao-float8-rowwise-gw-hp", low_passes=(2, 3),  # the weight gradient's GEMM stays BF16
                  notes=(f"{AO}/config.py:353-378: rowwise with the weight gradient in high precision",)
                  + _AO_NOTES),
     "torchao float8 training, rowwise with a high-precision weight gradient")
