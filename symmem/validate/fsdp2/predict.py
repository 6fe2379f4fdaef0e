"""What the `torchtitan-cpu` profile predicts for a run of `runner.Settings`: per rank, the model states
(`symmem.accounting.fsdp`) and what each block and the rest of the model save for backward (the rule set
`torchtitan-cpu` over the Hugging Face Llama dataflow with SDPA, or torchtitan's DeepSeek-V3 dataflow,
symmem.blocks.torchtitan). The settings become an HF Llama (or DeepSeek-V3) config
(`hf_config`), the same dims torchtitan builds from."""

from __future__ import annotations

import json

AC_RECOMPUTE = {"none": "none", "full": "full", "selective-op": "selective-op"}  # torchtitan's AC -> symmem's policy


def hf_config(st) -> dict:
    """The HF Llama config of the runner's torchtitan model (untied embeddings, RMSNorm eps 1e-5)."""
    if st.ffn_hidden is None:
        raise ValueError("give ffn_hidden explicitly to predict (torchtitan's rounding is not applied here)")
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": st.dim,
            "intermediate_size": st.ffn_hidden, "num_hidden_layers": st.n_layers,
            "num_attention_heads": st.n_heads, "num_key_value_heads": st.n_kv_heads, "vocab_size": st.vocab,
            "max_position_embeddings": st.max_seq_len, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}


def deepseek_v3_config(st) -> dict:
    """The HF DeepSeek-V3 config of the runner's torchtitan DeepSeek-V3 (`runner.MoESettings`): no MTP, untied."""
    from symmem.validate.fsdp2.runner import MoESettings

    m = st.moe or MoESettings()
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": st.dim,
            "intermediate_size": m.dense_hidden, "moe_intermediate_size": m.moe_hidden,
            "num_hidden_layers": st.n_layers, "num_attention_heads": st.n_heads, "num_key_value_heads": st.n_heads,
            "n_routed_experts": m.num_experts, "num_experts_per_tok": m.top_k,
            "n_shared_experts": m.num_shared_experts, "q_lora_rank": m.q_lora_rank or None,
            "kv_lora_rank": m.kv_lora_rank, "qk_nope_head_dim": m.qk_nope_head_dim,
            "qk_rope_head_dim": m.qk_rope_head_dim, "v_head_dim": m.v_head_dim,
            "first_k_dense_replace": m.n_dense_layers, "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
            "vocab_size": st.vocab, "max_position_embeddings": st.max_seq_len, "scoring_func": m.score_func,
            "norm_topk_prob": m.route_norm, "n_group": m.n_group, "topk_group": m.topk_group,
            "tie_word_embeddings": False}


def scenario(st, raw: dict | None = None, name: str = "config"):
    """The symmem Scenario of the run: profile torchtitan-cpu, FSDP over `world` (ZeRO-3), BF16 activations. `name`:
    what an error about the config calls it (the user's file, not a copy)."""
    from symmem._config_checks import check_config
    from symmem.config import from_dict
    from symmem.errors import SymmemError
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    if st.ac not in AC_RECOMPUTE and not st.ac.startswith("selective-layer:"):
        raise SymmemError(f"--ac = {st.ac!r}: predicted for none, full, selective-op and selective-layer:N")
    # the config as load_model reads a file (the same checks, then its family), under the user's name
    config = raw or (deepseek_v3_config(st) if st.family == "deepseek_v3" else hf_config(st))
    check_config(config, name)
    model = from_dict(json.loads(json.dumps(config)), name)
    from symmem.accounting.states import recipe, zero_stage

    scn = model_scenario(model).replace(
        profile_name="torchtitan-cpu", precision=recipe(FLOAT8_RECIPES[st.float8] if st.float8 else "fp32"),
        zero=zero_stage(3),
        parallel=Parallel(dp=st.world // (st.replicate * st.tp), tp=st.tp, sequence_parallel=st.tp > 1,
                          moe_sequence_parallel=st.tp > 1),  # DeepSeek-V3's MoE output reduce-scattered to s/t
        b=st.b, s=st.s,
        act_bytes={"bf16": 2, "fp16": 2, "fp32": 4}[st.param_dtype],  # FSDP2 casts the inputs to param_dtype
        recompute_name=AC_RECOMPUTE.get(st.ac, st.ac), compiled=st.compile)
    if st.float8_all_gather:
        from symmem.profiles import with_fsdp_float8_all_gather

        scn = with_fsdp_float8_all_gather(scn)
    return scn


# the runner's torchao recipe (Float8LinearConfig.from_recipe_name) -> symmem's precision recipe
FLOAT8_RECIPES = {"tensorwise": "torchao-float8-tensorwise", "rowwise": "torchao-float8-rowwise",
                  "rowwise_with_gw_hp": "torchao-float8-rowwise-gw-hp"}


def unsharded_bytes(scn, parts, params, n: int) -> dict[str, int]:
    """Per FSDP unit (each block, and the root: the embedding, final norm and lm_head), the bytes its gathered
    parameters take: every rank's padded shard (FSDP2 gathers dim 0 padded to a multiple of the shard group `n`,
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py `init_all_gather_outputs`) in the param dtype
    (`Scenario.gather_bytes`), or under the float8 all-gather a Float8 linear's at 1 byte per element and its FP32
    scale (`timeline.Float8Gathered`)."""
    from symmem.accounting.fsdp import gathered_in_float8
    from symmem.validate.fsdp2.peak import layer_of, param_layer

    float8 = gathered_in_float8(scn, parts, params)
    layers = layer_of(parts)
    out: dict[str, int] = {}
    for p in params:
        i = param_layer(p, layers)
        unit = "root" if i is None else f"layer {i}"
        f8 = p.name in float8
        out[unit] = out.get(unit, 0) + p.padded(n) * n * (1 if f8 else scn.gather_bytes) + (4 if f8 else 0)
    return out


def predicted(st, raw: dict | None = None, name: str = "config") -> list[dict]:
    """Per rank: `states` (bytes, by kind), `saved` (per block, and outside the blocks), `unsharded` (per FSDP unit:
    its gathered parameters, `unsharded_bytes`), `held_per_block` (per block:
    its saved bytes and what the autograd graph holds beside them, the growth of the live bytes over the block's
    forward), the live bytes at the step's `start` and each phase's most (`peaks`: `peak.Peaks`, None where the
    closed forms were not checked)."""
    from symmem.accounting.analysis import stage_terms, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.accounting.fsdp import fsdp_params, rank_states, shard_degree
    from symmem.model import stage_parts
    from symmem.rules.torchtitan import HELD_NOT_SAVED

    scn = scenario(st, raw, name)
    (stage,) = scn.stages
    vals = values(scn)

    def per_part(sc, held: bool = False) -> dict[str, int]:
        """Bytes per part: saved for backward, or (`held`) all the forward leaves alive for the backward,
        including what the autograd graph holds beside the saved tensors (`torchtitan.HELD_NOT_SAVED`)."""
        out: dict[str, int] = {}
        for t in stage_terms(sc, stage):
            if held or not t.tensor.endswith(HELD_NOT_SAVED):
                out[t.part] = out.get(t.part, 0) + ceil_int(evaluate(t.nbytes, vals))
        return out

    # each block's saved bytes: its own part's (DeepSeek-V3: dense or MoE) under the policy it runs (per-layer
    # checkpointing: full or none by layer)
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    part_of = {i: p.name for p in parts if p.is_layers for i in p.layer_ids}
    policies = {scn.policy.for_layer(i) for i in range(st.n_layers)}
    by_policy = {pol: per_part(scn.replace(recompute_name=pol.label)) for pol in policies}
    held_by_policy = {pol: per_part(scn.replace(recompute_name=pol.label), held=True) for pol in policies}
    outside = sum(v for k, v in per_part(scn).items() if k not in part_of.values())
    saved = {f"layer {i}": by_policy[scn.policy.for_layer(i)][part_of[i]] for i in range(st.n_layers)}
    held = {f"layer {i}": held_by_policy[scn.policy.for_layer(i)][part_of[i]] for i in range(st.n_layers)}
    params = fsdp_params(parts, vals, fuse_qkv=st.family == "llama3", axes=scn.parallel.axis_sizes())
    n = shard_degree(scn)
    unsharded = unsharded_bytes(scn, parts, params, n)
    from symmem.validate.fsdp2.growth import head_growth
    from symmem.validate.fsdp2.peak import peaks

    head = head_growth(scn, stage, vals)
    out = []
    for rank in range(st.world):
        shard = (rank // st.tp) % n  # its index in the shard group: tp innermost in the mesh, then fsdp
        r = rank_states(params, n, shard, step_on_device=True)
        pk = peaks(st, scn, params, shard, [saved[f"layer {i}"] for i in range(st.n_layers)],
                   [held[f"layer {i}"] for i in range(st.n_layers)])
        out.append({"rank": rank, "start": pk.start, "peaks": pk,
                    "states_by_kind": {"params": r.params, "grads": r.grads, "exp_avg": r.exp_avg,
                                       "exp_avg_sq": r.exp_avg_sq, "step": r.step},
                    "states": r.total,
                    "saved": {**saved, "outside layers": outside},
                    "held_per_block": held, "unsharded": unsharded,
                    "head_growth": head})
    return out
