"""Names of Hugging Face's implementation switches a torch-eager dataflow can follow (transformers'
`attn_implementation` and `experts_implementation`)."""

ATTN_IMPLS = ("eager", "sdpa")
EXPERTS_IMPLS = ("eager", "grouped_mm")
