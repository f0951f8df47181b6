#include "core/output_file.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mg {

void check_written(const std::ofstream& file, const std::string& path, std::string_view op) {
  // errno still holds the reason of the failed write(2) or close(2) underneath the stream.
  MG_CHECK(file.good(), "{}: writing {} failed ({}); is the disk full, or the path not a writable file?", op, path,
           errno != 0 ? std::strerror(errno) : "the stream reports an error");
}

void close_checked(std::ofstream& file, const std::string& path, std::string_view op) {
  errno = 0;
  file.close();
  check_written(file, path, op);
}

void write_file(const std::string& path, std::string_view text, std::string_view op) {
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  MG_CHECK(file.is_open(), "{}: cannot open {} for writing ({}); does the directory exist and is it writable?", op,
           path, errno != 0 ? std::strerror(errno) : "unknown reason");
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  close_checked(file, path, op);
}

}  // namespace mg
