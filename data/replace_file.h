// The file-system side of replacing a file so that a crash leaves it whole, old or new: what
// data::save_safetensors does around its bytes (a temporary file beside the target, written, flushed,
// renamed over it; then the directory flushed). The format's side is data/safetensors.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mg::data {

// Writes `size` bytes to the open file `fd` (at `path`), through short writes and EINTR; a failure is an
// mg::Error naming `op` and the path.
void write_all(int fd, const void* data, std::size_t size, const std::string& path, std::string_view op);

// Flushes the directory entry of `path` to the disk, so that a renamed file survives a power cut; a
// directory that cannot be synced (some file systems refuse) is passed over.
void sync_directory_of(const std::string& path);

// Removes the temporary files "NAME.tmp.PID.N" that saves to `path` killed mid-way left behind, those
// whose process no longer exists.
void remove_leftovers_of(const std::string& path);

}  // namespace mg::data
