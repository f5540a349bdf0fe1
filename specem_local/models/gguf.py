"""Read a GGUF file's header (metadata and tensor table) without loading any weights.

Used for ``specem models list`` and, before llama.cpp ever opens a file, to reject files that
are not GGUF or are truncated: llama.cpp may crash the process on such files, we must not.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specem_local.dirs import not_a_file
from specem_local.errors import SpecemError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format (scalars only; 8 = string, 9 = array).
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# ggml tensor type -> (name, elements per block, bytes per block), from ggml.h / ggml.c.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

# llama_ftype (general.file_type) -> the usual quantisation name.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def n_bytes(self) -> int | None:
        """Size of the tensor's data, or None for a type this reader does not know."""
        known = GGML_TYPES.get(self.ggml_type)
        if known is None:
            return None
        _, block_elements, block_bytes = known
        return self.n_elements // block_elements * block_bytes


@dataclass(frozen=True)
class GGUFHeader:
    """What ``specem models list`` shows about a file, all read from its header."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_size: int

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return None if value is None else str(value)

    @property
    def parameter_count(self) -> int:
        return sum(tensor.n_elements for tensor in self.tensors)

    @property
    def quantization(self) -> str:
        file_type = self.metadata.get("general.file_type")
        if isinstance(file_type, int) and file_type in FILE_TYPES:
            return FILE_TYPES[file_type]
        counts: dict[str, int] = {}
        for tensor in self.tensors:
            type_name = GGML_TYPES.get(tensor.ggml_type, (f"type{tensor.ggml_type}", 1, 1))[0]
            counts[type_name] = counts.get(type_name, 0) + tensor.n_elements
        return max(counts, key=counts.__getitem__) if counts else "unknown"

    @property
    def vocab_size(self) -> int | None:
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        return tokens.length if isinstance(tokens, ArrayInfo) else None

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return value if isinstance(value, int) else None

    @property
    def layers(self) -> int:
        """What llama.cpp counts when offloading: the repeating blocks and the output layer."""
        value = self.metadata.get(f"{self.architecture}.block_count")
        return (value if isinstance(value, int) else 0) + 1

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def required_size(self) -> int | None:
        """Bytes the file needs to hold every tensor, or None if a tensor type is unknown."""
        end = self.data_offset
        for tensor in self.tensors:
            size = tensor.n_bytes
            if size is None:
                return None
            end = max(end, self.data_offset + tensor.offset + size)
        return end


@dataclass(frozen=True)
class ArrayInfo:
    """A metadata array, summarised: big arrays (the vocabulary) are not kept in memory."""

    item_type: int
    length: int


# The fewest bytes each header entry can take: a key-value pair (key length, type, a 1-byte
# value), a string, a tensor (name length, dimension count, type, offset). A count that could
# not fit in the file is refused at once: a sparse file claiming 2^40 entries must not be walked.
MIN_PAIR_BYTES, MIN_STRING_BYTES, MIN_TENSOR_BYTES = 13, 8, 24
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 8


class _Reader:
    def __init__(self, buffer: mmap.mmap | bytes, path: Path) -> None:
        self.buffer = buffer
        self.position = 0
        self.path = path

    def count(self, what: str, least_bytes: int) -> int:
        """A count from the header, refused if that many entries cannot fit in the rest of the file."""
        value = self.scalar("<Q")
        if value * least_bytes > len(self.buffer) - self.position:
            raise SpecemError(
                f"{self.path}: corrupt GGUF header: it claims {value:,} {what}, more than its "
                f"{len(self.buffer):,} bytes can hold; delete it and download it again"
            )
        return value

    def take(self, size: int) -> bytes:
        end = self.position + size
        if end > len(self.buffer):
            raise SpecemError(
                f"{self.path}: the GGUF header is cut short (truncated file); "
                "delete it and download or assemble it again"
            )
        chunk = self.buffer[self.position : end]
        self.position = end
        return bytes(chunk)

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length = self.scalar("<Q")
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, value_type: int, depth: int = 0) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY and depth < MAX_ARRAY_NESTING:
            item_type = self.scalar("<I")
            if item_type in _SCALAR_FORMATS:
                length = self.count("array items", struct.calcsize(_SCALAR_FORMATS[item_type]))
                self.take(struct.calcsize(_SCALAR_FORMATS[item_type]) * length)
            else:
                length = self.count("array items", MIN_STRING_BYTES if item_type == _STRING else 12)
                for _ in range(length):
                    self.value(item_type, depth + 1)
            return ArrayInfo(item_type, length)
        if value_type == _ARRAY:
            raise SpecemError(f"{self.path}: corrupt GGUF header: arrays nested deeper than {MAX_ARRAY_NESTING}")
        raise SpecemError(f"{self.path}: unknown GGUF metadata type {value_type}; corrupt file?")


def read_header(path: str | Path) -> GGUFHeader:
    """Parse the header of ``path``; raise ``SpecemError`` if it is not a whole GGUF file, or
    cannot be read (no permission, a device that refuses to be mapped)."""
    try:
        return _header(Path(path))
    except OSError as error:
        raise SpecemError(f"{path}: cannot read it ({error.strerror or error})") from None


def _header(path: Path) -> GGUFHeader:
    kind = not_a_file(path)
    if kind is not None:
        raise SpecemError(f"{path}: {kind}")
    file_size = path.stat().st_size
    if file_size < 24:
        raise SpecemError(f"{path}: not a GGUF file (only {file_size} bytes)")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != GGUF_MAGIC:
            raise SpecemError(
                f"{path}: not a GGUF file (starts with {bytes(buf[:4])!r}, expected b'GGUF'); "
                "llama.cpp needs a .gguf model"
            )
        reader = _Reader(buf, path)
        reader.take(4)
        version = reader.scalar("<I")
        if version not in (2, 3):
            raise SpecemError(f"{path}: unsupported GGUF version {version} (this reads 2 and 3)")
        n_tensors = reader.count("tensors", MIN_TENSOR_BYTES)
        n_metadata = reader.count("metadata entries", MIN_PAIR_BYTES)
        metadata: dict[str, Any] = {}
        for _ in range(n_metadata):
            key = reader.string()
            metadata[key] = reader.value(reader.scalar("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = reader.string()
            n_dims = reader.scalar("<I")
            if n_dims > MAX_DIMS:
                raise SpecemError(f"{path}: corrupt GGUF header: tensor {name[:40]!r} has {n_dims} dimensions")
            shape = tuple(reader.scalar("<Q") for _ in range(n_dims))
            tensors.append(TensorInfo(name, shape, reader.scalar("<I"), reader.scalar("<Q")))
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
            raise SpecemError(f"{path}: corrupt GGUF header: general.alignment = {str(alignment)[:20]}")
        data_offset = -(-reader.position // alignment) * alignment
    header = GGUFHeader(path, version, metadata, tuple(tensors), data_offset, file_size)
    required = header.required_size
    if required is not None and required > file_size:
        raise SpecemError(
            f"{path}: truncated GGUF file ({file_size:,} bytes, its tensors need {required:,}); "
            "delete it and download or assemble it again"
        )
    return header


def read_model_header(path: str | Path) -> GGUFHeader:
    """``read_header``, and the file must hold weights: a GGUF without tensors (a vocabulary
    file) parses, but llama.cpp cannot run it."""
    header = read_header(path)
    if not header.tensors:
        raise SpecemError(f"{path}: a GGUF file without tensors (a vocabulary file?), not a model llama.cpp can run")
    return header
