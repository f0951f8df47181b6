// Safetensors: the checkpoint format of Hugging Face (github.com/huggingface/safetensors), read and
// written here with nothing but a JSON parser, so a mixgrad checkpoint opens in PyTorch
// (safetensors.torch.load_file) and a file saved by PyTorch opens in mixgrad.
//
// A file is three regions, one after the other:
//
//   bytes [0, 8)        N, the length of the header: a little-endian unsigned 64-bit integer
//   bytes [8, 8 + N)    the header: UTF-8 JSON, padded with spaces to a multiple of 8 bytes
//                         {"__metadata__": {"step": "1200"},                        <- optional
//                          "fc1.bias":   {"dtype": "F32", "shape": [256], "data_offsets": [0, 1024]},
//                          "fc1.weight": {"dtype": "F32", "shape": [256, 784], "data_offsets": [1024, 803840]}}
//   bytes [8 + N, end)  the data buffer: each tensor's elements, row-major and little-endian, at its
//                         data_offsets [begin, end), counted from the start of this buffer
//
// The dtypes mixgrad holds are every row of MG_DTYPES (core/dtype.h), by the names the format uses:
// F32, F16, BF16, F64, I32, F8_E4M3, F8_E5M2, I64, U8, BOOL, F4 and F8_E8M0. Coded tensors are their
// codes, byte for byte; F4 (E2M1) packs two elements a byte, element 2k in the low nibble, and the
// header's shape counts elements, so its last dimension must be even (PyTorch's float4_e2m1fn_x2
// holds half of it). A file with any other dtype (I16, F6_E2M3, ...) is refused, naming the tensor.
//
//   data::save_safetensors("mlp.safetensors", state, {{"recipe", "mixed_float16"}});
//   data::SafetensorsFile file = data::load_safetensors("mlp.safetensors");
//   Tensor& stored = file.tensors["fc1.weight"];  // undefined when the file has no such tensor
//   data::check_matches(stored, weight, "fc1.weight", "mlp.safetensors");
//   weight.copy_(stored);                         // under NoGradGuard when weight requires grad
#pragma once

#include <map>
#include <string>

#include "core/state_dict.h"

namespace mg::data {

// Writes `tensors` (in key order) and `metadata` (free-form strings, stored under "__metadata__";
// left out of the header when empty) to `path`, replacing any file there.
//
// Requires: every tensor defined and on the CPU; every key non-empty, not "__metadata__", and
// valid UTF-8, as every metadata string must be. 0-d tensors (shape []) and empty ones (numel 0)
// are fine. All of this is checked before anything touches the disk.
//
// Guarantees: the save is atomic. The bytes go to a temporary file beside `path` (in the same
// directory, so the rename stays within one file system), which is flushed to the disk (fsync) and
// then renamed over `path`. A crash or an error at any point leaves the previous file at `path`
// whole, and an error removes the temporary file before it propagates. A process killed mid-save
// (SIGKILL) cannot remove its temporary file, "PATH.tmp.PID.N"; the next save to `path` removes those
// whose process no longer exists (or delete them by hand: they are never read).
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  StateDict tensors;  // name -> a fresh CPU tensor that owns its data
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when the file has none
};

// Reads a safetensors file whole. Everything is validated before any tensor is made: the file size,
// the header length (at most 100,000,000 bytes, the limit of the reference implementation), the
// JSON, every entry (exactly the fields dtype, shape and data_offsets; a dtype mixgrad holds; sizes
// that are non-negative integers; data_offsets [begin, end] inside the data buffer with
// end - begin = numel x the dtype's size), and the buffer as a whole: the tensors tile it exactly,
// with no overlap, no hole and no trailing byte. Any failure is an mg::Error naming the file, the
// tensor and what is wrong with it. The file is untrusted input: a header nesting brackets deeper
// than 8 levels or holding a number outside double's range is refused the same way, and names and
// values are cut to a few dozen characters in the messages (fuzz/safetensors.cpp fuzzes this reader).
SafetensorsFile load_safetensors(const std::string& path);

// For code that loads a checkpoint into existing tensors (a model's parameters, an optimizer's
// moments): checks that `stored`, the tensor the file at `path` holds under `name`, has the dtype
// and shape of `expected`, the tensor it is about to be copied into. Pass an undefined `stored`
// when the file has no tensor of that name. An mg::Error names the file, the tensor and both
// dtypes and shapes when they differ; nothing is cast or reshaped silently.
void check_matches(const Tensor& stored, const Tensor& expected, const std::string& name, const std::string& path);

}  // namespace mg::data
