"""Low-precision formats as data: what a quantized tensor occupies, its data and its scaling factors (issue 21's
first piece; the recipes that say which tensors are quantized, and their wiring into the engine, are not built yet).
`quantized_bytes` follows TransformerEngine's allocations (read at c188b533, the 2.11.0 build); see `scales`."""

from symmem.precision.scales import FORMATS, QuantizedBytes, quantized_bytes

__all__ = ["FORMATS", "QuantizedBytes", "quantized_bytes"]
