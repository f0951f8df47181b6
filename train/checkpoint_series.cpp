#include "train/checkpoint_series.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/warning.h"

namespace mg::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "step-";
constexpr std::string_view kSuffix = ".safetensors";

// The step of a series' file name, or -1 for any other name (a temporary file, a .damaged one).
std::int64_t step_of(const std::string& name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return -1;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 15 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

}  // namespace

CheckpointSeries::CheckpointSeries(std::string directory, CheckpointSeriesOptions options)
    : directory_(std::move(directory)), options_(options) {
  MG_CHECK(options_.every >= 0 && options_.keep >= 0,
           "train::CheckpointSeries({}): every ({}) and keep ({}) must be >= 0", directory_, options_.every,
           options_.keep);
  MG_CHECK(!fs::exists(directory_) || fs::is_directory(directory_),
           "train::CheckpointSeries: {} is a file, not a directory; choose another directory for the checkpoints",
           directory_);
  std::error_code error;
  fs::create_directory(directory_, error);
  MG_CHECK(fs::is_directory(directory_),
           "train::CheckpointSeries: cannot make the directory {} for the checkpoints{}; does its parent exist?",
           directory_, error ? ": " + error.message() : std::string());
}

std::string CheckpointSeries::path_of(const std::string& directory, std::int64_t step) {
  return (fs::path(directory) / fmt::format("{}{:08}{}", kPrefix, step, kSuffix)).string();
}

std::vector<std::pair<std::int64_t, std::string>> CheckpointSeries::list(const std::string& directory) {
  std::vector<std::pair<std::int64_t, std::string>> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file()) files.emplace_back(step, entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void CheckpointSeries::begin_at(std::int64_t step, bool resumed_here) {
  const auto files = list(directory_);
  if (files.empty() || files.back().first <= step) return;
  MG_CHECK(resumed_here,
           "train::CheckpointSeries: {} already holds a checkpoint of step {} ({}), later than this run's step {}: "
           "it is another run's; resume from it (mixgrad train --resume {}), or choose another directory",
           directory_, files.back().first, files.back().second, step, directory_);
  for (const auto& [later, path] : files) {
    if (later <= step) continue;
    const std::string aside = path + ".damaged";
    fs::rename(path, aside);
    warn(fmt::format("{} could not be loaded; renamed {}, so that the series goes on from step {}", path, aside, step));
  }
}

SavedCheckpoint CheckpointSeries::save(std::int64_t step, const TrainingObjects& objects, const StateDict& extra,
                                       const std::map<std::string, std::string>& metadata) {
  const auto start = std::chrono::steady_clock::now();
  SavedCheckpoint saved{.path = path_of(directory_, step), .step = step};
  save_checkpoint(saved.path, objects, extra, metadata);
  saved.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  saved.bytes = static_cast<std::int64_t>(fs::file_size(saved.path));
  // Only now, with the new file complete, the oldest go.
  if (options_.keep > 0) {
    auto files = list(directory_);
    const std::size_t keep = static_cast<std::size_t>(options_.keep);
    for (std::size_t i = 0; i + keep < files.size(); ++i) {
      std::error_code ignored;  // a file already gone is no reason to fail a run
      if (files[i].first < step) fs::remove(files[i].second, ignored);
    }
  }
  return saved;
}

LoadedCheckpoint load_latest_checkpoint(const std::string& path, const TrainingObjects& objects,
                                        const std::map<std::string, std::string>& required) {
  if (!fs::is_directory(path)) return load_checkpoint(path, objects, required);
  const auto files = CheckpointSeries::list(path);
  MG_CHECK(!files.empty(),
           "train::load_latest_checkpoint: the directory {} holds no checkpoint (files named "
           "step-<step>.safetensors, as mixgrad train --save-every and train::CheckpointSeries write them)",
           path);
  std::string failures;
  for (auto file = files.rbegin(); file != files.rend(); ++file) {
    data::SafetensorsFile contents;
    try {
      contents = data::load_safetensors(file->second);
    } catch (const Error& damaged) {
      failures += fmt::format("\n  {}", damaged.what());
      if (std::next(file) != files.rend())
        warn(fmt::format("{} cannot be read, so the checkpoint before it, {}, is loaded: {}", file->second,
                         std::next(file)->second, damaged.what()));
      continue;
    }
    return load_checkpoint(file->second, std::move(contents), objects, required);
  }
  throw Error(fmt::format("train::load_latest_checkpoint: none of the {} checkpoints in {} can be read:{}",
                          files.size(), path, failures));
}

}  // namespace mg::train
