// Output files whose every write is checked. An std::ofstream fails quietly: with the disk full (or a
// path such as /dev/full) every write sets a flag nobody reads, and the program exits 0 with nothing
// written. The run's log, summary and report go through here, so such a failure is an mg::Error
// naming the file.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace mg {

// Writes `text` to `path`, replacing what was there, and checks the write and the close.
// `op` names the caller in the error ("mixgrad train: the summary").
void write_file(const std::string& path, std::string_view text, std::string_view op);

// Throws when a write to `file` (opened on `path`) has failed since it was opened. Buffered bytes
// reach the file only when it is flushed or closed, so call this after each batch of writes, and
// close_checked at the end.
void check_written(const std::ofstream& file, const std::string& path, std::string_view op);
// Flushes and closes `file`, then checks it as check_written does.
void close_checked(std::ofstream& file, const std::string& path, std::string_view op);

}  // namespace mg
