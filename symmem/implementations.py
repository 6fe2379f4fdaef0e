"""Names of the switches a measured Hugging Face layer runs under: its dtype, and transformers'
`attn_implementation` and `experts_implementation` that a torch-eager dataflow can follow."""

ATTN_IMPLS = ("eager", "sdpa")
EXPERTS_IMPLS = ("eager", "grouped_mm")
DTYPES = ("fp32", "bf16")  # symmem measure --dtype
