// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data]
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data) plus an optional "__metadata__" string map.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace pi0
{

using TensorMap = std::map<std::string, at::Tensor>;

// Loads every tensor of a .safetensors file.
//
// The file is memory-mapped (private, copy-on-write): the returned CPU tensors point into the
// mapping and keep it alive, so loading a multi-GB checkpoint costs no copy and no more memory
// than the page cache; writing into a tensor never changes the file. A tensor whose data is not
// aligned to its element size (possible in files from other writers) is copied instead.
// As with any mapping, truncating the file while its tensors are alive makes a later access
// fault (SIGBUS): replace checkpoints by rename (as save_safetensors does), never in place.
//
// The whole header is validated before any tensor is made: header length, JSON syntax, UTF-8,
// duplicate keys, known dtype, shape and byte-size agreement (with overflow checks), offsets
// inside the file, no overlaps, no gaps and no trailing bytes (the rules of the reference
// implementation). Any problem throws pi0::Error naming the file and the problem.
//
// Supported dtypes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL.
TensorMap load_safetensors (const std::string &path);

// Reads only the "__metadata__" map of a file (validating the header as load_safetensors does).
std::map<std::string, std::string> load_safetensors_metadata (const std::string &path);

// Writes `tensors` (any device or layout; copied to contiguous CPU memory while writing) and
// the optional string `metadata`. Tensors are ordered by element size, then name, and the
// header is padded to 8 bytes, so every tensor's data is aligned for memory-mapped reading.
// The file is written under a temporary name and renamed, so a failed save never leaves a
// truncated checkpoint at `path`. Throws pi0::Error on an unsupported dtype, an undefined or
// sparse tensor, the reserved name "__metadata__", or an I/O failure.
void save_safetensors (const std::string &path, const TensorMap &tensors,
                       const std::map<std::string, std::string> &metadata = {});

// The safetensors dtype string of a torch dtype ("F32", "BF16", ...); throws pi0::Error when
// the format has no code for it.
std::string safetensors_dtype_name (at::ScalarType dtype);

} // namespace pi0
