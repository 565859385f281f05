// POSIX file helpers for src/io: atomic replacement of a file, and whole or partial reads,
// each failure an ember::Error naming the path and the system's reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ember::io {

// Writes a new version of `path` that replaces the old one only when complete. Bytes go to a
// temporary file in the same directory ("<name>.tmp.<unique>"); commit() flushes it to disk,
// renames it over `path` and flushes the directory entry. Destroying an uncommitted writer
// (an error on the way, an exception elsewhere) removes the temporary file and leaves `path`
// untouched. A process killed mid-write leaves at most a stale temporary file behind.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t nbytes);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush_buffer();
  void write_fully(const void* data, size_t nbytes);
  void abandon() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<std::byte> buffer_;  // small writes are gathered into large ones
};

// Writes a whole file atomically (AtomicFileWriter in one call).
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);

// A file opened for reading, with its size taken once at open.
class ReadFile {
 public:
  explicit ReadFile(std::string path);  // throws Error: missing, a directory, unreadable
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly nbytes at offset; a short read (the file shrank) throws Error.
  void read_at(uint64_t offset, void* out, size_t nbytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::vector<std::byte> read_whole_file(const std::string& path);

}  // namespace ember::io
